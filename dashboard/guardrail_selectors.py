"""What the Guardrails page and the usage pages read of guardrails: the ones an account sees
with where each applies, and what their verdicts on its recent requests were.

The verdict counts read usage rows, which have no index on their verdicts: they read the
account's newest rows of the last 24 hours through its `(account_id, created_at)` index, at
most VERDICT_ROWS_MAX of them, so the page costs the same however busy the account is; past
that many requests in a day the page says the counts cover the newest ones only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import orjson
from django.db.models import Case, QuerySet, TextField, Value, When
from django.db.models.functions import Cast
from django.utils import timezone

from accounts.models import Account
from guardrails.models import Guardrail, GuardrailAttachment
from guardrails.selectors import guardrails_visible
from usage.models import UsageLog

VERDICT_WINDOW = timedelta(hours=24)
VERDICT_ROWS_MAX = 10_000
# The actions that changed what the vendor got; a verdict counts once it found something.
ACTING = ("block", "redact")
KNOWN_KEYS = ("guardrail", "phase", "action", "matches")


def guardrails_of_account(*, account: Account) -> QuerySet[Guardrail]:
    """The account's own guardrails and the operator's, the operator's first, by name."""
    own_last = Case(When(account__isnull=True, then=Value(0)), default=Value(1))
    return guardrails_visible([account.pk]).annotate(own=own_last).order_by("own", "name")


def attachments_of_account(*, account: Account) -> QuerySet[GuardrailAttachment]:
    return (
        GuardrailAttachment.objects.filter(account=account)
        .select_related("guardrail", "group", "api_key")
        .order_by("guardrail_id", "group_id", "api_key_id", "id")
    )


@dataclass
class VerdictCount:
    checked: int = 0  # verdicts: the guardrail ran on a request's input or output
    found: int = 0  # of those, the ones that found something (matches > 0)


@dataclass(frozen=True)
class RecentVerdicts:
    since: datetime  # 24 hours ago, or (capped) the oldest request read
    requests_read: int
    capped: bool  # as many requests as the cap: the counts cover the newest ones only
    by_name: dict[str, VerdictCount] = field(default_factory=dict)


def recent_verdicts(
    *, account: Account, now: datetime | None = None, rows_max: int = VERDICT_ROWS_MAX
) -> RecentVerdicts:
    """Count each guardrail's verdicts (by its name, as the rows record it) on the account's
    newest requests of the last 24 hours, at most `rows_max` of them."""
    now = now or timezone.now()
    since = now - VERDICT_WINDOW
    read = UsageLog.objects.filter(
        account_id=account.pk, created_at__gte=since, created_at__lte=now
    ).order_by("-created_at")
    # Only the verdicts, as text, parsed with orjson: the JSON field's decoding and each row's
    # time were most of the cost (80-170 ms for 10,000 rows of a day; now 28).
    rows = list(
        read.annotate(verdicts=Cast("guardrails", TextField())).values_list("verdicts", flat=True)[
            :rows_max
        ]
    )
    counts: dict[str, VerdictCount] = defaultdict(VerdictCount)
    for verdicts in rows:
        for verdict in verdicts_of(orjson.loads(verdicts)):
            count = counts[verdict["guardrail"]]
            count.checked += 1
            count.found += verdict["matches"] > 0
    capped = len(rows) == rows_max
    if capped:  # the oldest request read: the counts start there
        since = read.values_list("created_at", flat=True)[rows_max - 1]
    return RecentVerdicts(
        since=since,
        requests_read=len(rows),
        capped=capped,
        by_name=dict(counts),
    )


@dataclass(frozen=True)
class Verdict:
    guardrail: str
    phase: str
    action: str
    matches: int
    others: tuple[tuple[str, str], ...]  # keys added later ("failed", ...), shown as given


def verdicts_of(value: object) -> list[dict]:
    """The well-formed verdicts of a usage row's `guardrails` column (a row written by another
    release may hold other shapes: those are left out, never an error)."""
    if not isinstance(value, list):
        return []
    return [
        v
        for v in value
        if isinstance(v, dict)
        and isinstance(v.get("guardrail"), str)
        and isinstance(v.get("matches", 0), int)
    ]


def verdicts_shown(value: object) -> list[Verdict]:
    """A usage row's verdicts for its page: the four known fields, and any other key
    as its text."""
    return [
        Verdict(
            guardrail=v["guardrail"],
            phase=str(v.get("phase", "")),
            action=str(v.get("action", "")),
            matches=v.get("matches", 0),
            others=tuple((str(k), _text(v[k])) for k in sorted(v) if k not in KNOWN_KEYS),
        )
        for v in verdicts_of(value)
    ]


def acted(value: object) -> str:
    """What guardrails did to a request: "block" if one blocked it, "redact" if one redacted
    something, else "" (only flagged, or found nothing)."""
    done = {v.get("action") for v in verdicts_of(value) if v.get("matches", 0) > 0}
    return next((action for action in ACTING if action in done), "")


def acted_by(value: object, action: str) -> list[str]:
    """The names of the guardrails that took `action` on a request."""
    return [
        v["guardrail"]
        for v in verdicts_of(value)
        if v.get("action") == action and v.get("matches", 0) > 0
    ]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)[:80]
