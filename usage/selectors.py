"""Reads of the usage log, scoped to the caller's accounts.

Totals come from the hourly rollups (usage/rollups.py) for whole hours and from the rows only
for the partial hours at a range's ends, so they cost the same whatever the history; a
filter the rollups do not keep (caller, client request id) reads the rows. Lists are read
newest first through the `(account_id, created_at)`-style indexes, by cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, F, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, NullIf, TruncDate

from accounts.selectors import accounts_of_user
from usage.models import UsageLog, UsageRollup
from usage.rollups import hour_of, next_hour

# Filters only the rows know: with one of these, totals are summed from the rows.
ROW_ONLY_FILTERS = ("caller", "client_request_id")
# The totals a tenant reads (the API's TotalsOut), each also a rollup column.
TOTALS = (
    "requests",
    "errors",
    "tokens_in",
    "tokens_out",
    "byok_tokens_in",
    "byok_tokens_out",
    "provider_cost_micro",
    "bytes_in",
    "bytes_out",
    "bandwidth_charge_micro",
    "web_pages",
    "web_rendered_pages",
    "web_queries",
)


def account_ids_of_user(*, user: AbstractBaseUser, account: int | None = None) -> list[int]:
    """The ids of the accounts whose usage the user may read (only `account`, when given)."""
    ids = accounts_of_user(user=user).values_list("pk", flat=True)
    if account is not None:
        ids = ids.filter(pk=account)
    return list(ids)


def _scoped(qs: QuerySet, accounts: Sequence[int]) -> QuerySet:
    if len(accounts) == 1:  # one account (the usual case): an index range, not an IN list
        return qs.filter(account_id=accounts[0])
    return qs.filter(account_id__in=list(accounts))


def usage_logs(
    *,
    accounts: Sequence[int],
    group: int | None = None,
    key: int | None = None,
    caller: str | None = None,
    endpoint: str | None = None,
    client_request_id: str | None = None,
    model: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> QuerySet[UsageLog]:
    """Return the accounts' usage rows, newest first, filtered (end is exclusive)."""
    logs = _scoped(UsageLog.objects.all(), accounts)
    if group is not None:
        logs = logs.filter(group_id=group)
    if key is not None:
        logs = logs.filter(api_key_id=key)
    if caller:
        logs = logs.filter(caller_label=caller)
    if endpoint:
        logs = logs.filter(endpoint=endpoint)
    if client_request_id:
        logs = logs.filter(client_request_id=client_request_id)
    if model:
        logs = logs.filter(Q(model_served=model) | Q(model_requested=model))
    if start is not None:
        logs = logs.filter(created_at__gte=start)
    if end is not None:
        logs = logs.filter(created_at__lt=end)
    return logs.order_by("-created_at", "-id")


def usage_logs_of_user(
    *, user: AbstractBaseUser, account: int | None = None, **filters
) -> QuerySet[UsageLog]:
    """Return the user's accounts' usage rows (in `account` only, when given), newest first."""
    return usage_logs(accounts=account_ids_of_user(user=user, account=account), **filters)


def usage_log_of_user(*, user: AbstractBaseUser, request_id: str) -> UsageLog | None:
    """Return one of the user's rows by the gateway's id, else the newest with that client id.

    Only the user's own accounts are searched: another tenant's id finds nothing. The
    gateway's id is looked up first, on its own index; the client's label only if that fails.
    """
    accounts = account_ids_of_user(user=user)
    rows = _scoped(UsageLog.objects.prefetch_related("attempts"), accounts)
    found = rows.filter(request_id=request_id).first()
    if found is None:
        found = rows.filter(client_request_id=request_id).order_by("-created_at", "-id").first()
    return found


def _row_totals() -> dict:
    def total(field: str) -> Coalesce:
        return Coalesce(Sum(field), Value(0))

    return {
        "requests": Count("id"),
        "errors": Count("id", filter=~Q(status=200)),
        **{name: total(name) for name in TOTALS[2:]},
    }


def _rollup_totals() -> dict:
    return {name: Coalesce(Sum(name), Value(0)) for name in TOTALS}


def usage_zero_totals() -> dict:
    """Return the totals of no usage at all: each total usage_per_day gives, at 0."""
    return dict.fromkeys(TOTALS, 0)


def _rollups(
    *,
    accounts: Sequence[int],
    group: int | None = None,
    key: int | None = None,
    endpoint: str | None = None,
    model: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> QuerySet[UsageRollup]:
    rollups = _scoped(UsageRollup.objects.all(), accounts)
    if group is not None:
        rollups = rollups.filter(group_id=group)
    if key is not None:
        rollups = rollups.filter(api_key_id=key)
    if endpoint:
        rollups = rollups.filter(endpoint=endpoint)
    if model:
        rollups = rollups.filter(Q(model_served=model) | Q(model_requested=model))
    if start is not None:
        rollups = rollups.filter(hour__gte=start)
    if end is not None:
        rollups = rollups.filter(hour__lt=end)
    return rollups


# What totals can be split by: the expression on the rows, then on the rollups.
SPLITS = {
    "day": (TruncDate("created_at"), TruncDate("hour")),
    "model": (
        Coalesce(NullIf("model_served", Value("")), "model_requested"),
        Coalesce(NullIf("model_served", Value("")), "model_requested"),
    ),
    "group_id": (Coalesce("group_id", Value(0)), F("group_id")),
    "api_key_id": (Coalesce("api_key_id", Value(0)), F("api_key_id")),
    "served_by": (F("served_by"), F("served_by")),
}


def _grouped(qs: QuerySet, split, totals: dict) -> list[dict]:
    if split is None:
        return [qs.order_by().aggregate(**totals)]
    return list(qs.order_by().annotate(split=split).values("split").annotate(**totals))


def usage_totals(*, accounts: Sequence[int], by: str | None = None, **filters) -> list[dict]:
    """Return the filtered usage's totals, one dict per value of `by` (a SPLITS name, sorted
    by it, the value under that name) or one dict for all (`by` None)."""
    row_split, rollup_split = SPLITS[by] if by else (None, None)
    parts: list[dict] = []
    start, end = filters.pop("start", None), filters.pop("end", None)
    if any(filters.get(name) for name in ROW_ONLY_FILTERS):
        row_ranges, hours = [(start, end)], None
    else:
        row_ranges, hours = _split_hours(start, end)
    for lo, hi in row_ranges:
        rows = usage_logs(accounts=accounts, start=lo, end=hi, **filters)
        parts += _grouped(rows, row_split, _row_totals())
    if hours is not None:
        rollup_filters = {k: v for k, v in filters.items() if k not in ROW_ONLY_FILTERS}
        rollups = _rollups(accounts=accounts, start=hours[0], end=hours[1], **rollup_filters)
        parts += _grouped(rollups, rollup_split, _rollup_totals())
    merged: dict = {}
    for part in parts:
        value = part.pop("split", None)
        into = merged.setdefault(value, usage_zero_totals())
        for name in TOTALS:
            into[name] += int(part[name])
    if by is None:
        return [merged.get(None, usage_zero_totals())]
    return [{by: value, **merged[value]} for value in sorted(merged)]


def _split_hours(start: datetime | None, end: datetime | None) -> tuple[list[tuple], tuple | None]:
    """Split [start, end) into the whole hours the rollups serve and the partial hours at
    its ends that the rows serve."""
    lo = next_hour(start) if start is not None else None
    hi = hour_of(end) if end is not None else None
    if lo is not None and hi is not None and lo >= hi:
        return [(start, end)], None
    row_ranges = []
    if start is not None and start != lo:
        row_ranges.append((start, lo))
    if end is not None and end != hi:
        row_ranges.append((hi, end))
    return row_ranges, (lo, hi)


def usage_count(*, accounts: Sequence[int], **filters) -> int | None:
    """The number of rows the filters match, from the rollups; None with a filter only the
    rows know (the caller counts those rows itself, up to a cap).

    Rows past retention are gone while their rollups stay, so the count starts at the
    oldest row kept.
    """
    if any(filters.get(name) for name in ROW_ONLY_FILTERS):
        return None
    oldest = UsageLog.objects.order_by("created_at").values_list("created_at", flat=True).first()
    if oldest is None:
        return 0
    start = filters.get("start")
    filters["start"] = max(start, oldest) if start is not None else oldest
    end = filters.get("end")
    if end is not None and filters["start"] >= end:
        return 0
    [totals] = usage_totals(accounts=accounts, **filters)
    return totals["requests"]


def usage_per_day(*, accounts: Sequence[int], **filters) -> list[dict]:
    """Return totals per UTC day, oldest first."""
    return usage_totals(accounts=accounts, by="day", **filters)


def usage_per_model(*, accounts: Sequence[int], **filters) -> list[dict]:
    """Return totals per model (the one that served, else the one asked for), by name."""
    return usage_totals(accounts=accounts, by="model", **filters)


# ---------------------------------------------------------------- keyset pages of rows

Mark = tuple[datetime, int]  # a row's (created_at, id): where a page starts or ends


def older_than(logs: QuerySet[UsageLog], mark: Mark) -> QuerySet[UsageLog]:
    """The rows of `logs` after `mark` in newest-first order, newest first."""
    created_at, pk = mark
    # The range on created_at walks the index; a tie on it is settled by id.
    return (
        logs.filter(created_at__lte=created_at)
        .filter(Q(created_at__lt=created_at) | Q(id__lt=pk))
        .order_by("-created_at", "-id")
    )


def newer_than(logs: QuerySet[UsageLog], mark: Mark) -> QuerySet[UsageLog]:
    """The rows of `logs` before `mark` in newest-first order, oldest first."""
    created_at, pk = mark
    return (
        logs.filter(created_at__gte=created_at)
        .filter(Q(created_at__gt=created_at) | Q(id__gt=pk))
        .order_by("created_at", "id")
    )


def mark_text(row: UsageLog) -> str:
    """A row's mark for a link: microseconds since the epoch, a dot, its id."""
    return f"{round(row.created_at.timestamp() * 1_000_000)}.{row.pk}"


def parse_mark(text: str | None) -> Mark | None:
    """The mark `mark_text` wrote, or None when `text` is not one."""
    micros, _, pk = (text or "").partition(".")
    if not (micros.isdigit() and pk.isdigit()) or len(micros) > 18:
        return None
    return datetime.fromtimestamp(int(micros) / 1_000_000, tz=UTC), int(pk)


@dataclass(frozen=True)
class RowsPage:
    rows: list[UsageLog]
    older: str | None  # the mark to ask for the next older page with, if there is one
    newer: str | None  # the mark to ask for the next newer page with, if there is one


def usage_page(
    logs: QuerySet[UsageLog], *, older: Mark | None = None, newer: Mark | None = None, size: int
) -> RowsPage:
    """One page of `logs` (newest first): the newest, or the one older / newer than a mark.
    Costs the same at any depth: no OFFSET, no count."""
    if newer is not None:
        rows = list(newer_than(logs, newer)[: size + 1])
        more_newer = len(rows) > size
        rows = rows[:size][::-1]
        return RowsPage(
            rows=rows,
            older=mark_text(rows[-1]) if rows else None,
            newer=mark_text(rows[0]) if rows and more_newer else None,
        )
    page = older_than(logs, older) if older is not None else logs.order_by("-created_at", "-id")
    rows = list(page[: size + 1])
    more_older = len(rows) > size
    rows = rows[:size]
    return RowsPage(
        rows=rows,
        older=mark_text(rows[-1]) if rows and more_older else None,
        newer=mark_text(rows[0]) if rows and older is not None else None,
    )
