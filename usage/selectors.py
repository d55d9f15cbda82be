"""Reads of the usage log, scoped to the caller's accounts.

Totals come from the daily rollups for a range's whole days, the hourly ones for the whole
hours around them, and the rows only for the partial hours at its ends (usage/rollups.py,
`spans`), so they cost the same whatever the history; a filter the rollups do not keep
(caller, client request id) reads the rows. Lists are read newest first through the
`(account_id, created_at)`-style indexes, by cursor or by mark, never by offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth.models import User
from django.db.models import Count, F, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, NullIf, TruncDate

from accounts.selectors import accounts_of_user
from usage.models import UsageDailyRollup, UsageLog, UsageRollup
from usage.rollups import (
    CACHE_COLUMNS,
    cache_aggregates,
    day_of,
    hour_of,
    next_day,
    next_hour,
    time_field,
)
from usage.tags import tagged

# Filters only the rows know: with one of these, totals are summed from the rows.
ROW_ONLY_FILTERS = ("caller", "client_request_id", "tag")
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


def account_ids_of_user(*, user: User, account: int | None = None) -> list[int]:
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
    served_by: str | None = None,
    tag: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> QuerySet[UsageLog]:
    """Return the accounts' usage rows, newest first, filtered (end is exclusive).
    `served_by` "" is the rows no attempt served (refusals)."""
    logs = _scoped(UsageLog.objects.all(), accounts)
    if served_by is not None:
        logs = logs.filter(served_by=served_by)
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
    if tag:
        logs = tagged(logs, tag)
    if start is not None:
        logs = logs.filter(created_at__gte=start)
    if end is not None:
        logs = logs.filter(created_at__lt=end)
    return logs.order_by("-created_at", "-id")


def usage_logs_of_user(*, user: User, account: int | None = None, **filters) -> QuerySet[UsageLog]:
    """Return the user's accounts' usage rows (in `account` only, when given), newest first."""
    return usage_logs(accounts=account_ids_of_user(user=user, account=account), **filters)


def usage_log_of_user(*, user: User, request_id: str) -> UsageLog | None:
    """Return one of the user's rows by the gateway's id, else the newest with that client id.

    Only the user's own accounts are searched: another tenant's id finds nothing. The
    gateway's id is looked up first, on its own index; the client's label only if that fails.
    """
    accounts = account_ids_of_user(user=user)
    rows = _scoped(UsageLog.objects.all(), accounts)
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


def _rollup_totals(names: Sequence[str] = TOTALS) -> dict:
    return {name: Coalesce(Sum(name), Value(0)) for name in names}


def usage_zero_totals() -> dict:
    """Return the totals of no usage at all: each total usage_per_day gives, at 0."""
    return dict.fromkeys(TOTALS, 0)


# The kinds of totals a range is read for: the names, and their aggregates over usage rows
# (over rollups each is the sum of the rollup column of its name).
USAGE_KIND = (TOTALS, _row_totals)
CACHE_KIND = (CACHE_COLUMNS, cache_aggregates)


def _rollups(
    model,
    *,
    accounts: Sequence[int],
    group: int | None = None,
    key: int | None = None,
    endpoint: str | None = None,
    model_name: str | None = None,
    served_by: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> QuerySet:
    rollups = _scoped(model.objects.all(), accounts)
    time = time_field(model)
    if served_by is not None:
        rollups = rollups.filter(served_by=served_by)
    if group is not None:
        rollups = rollups.filter(group_id=group)
    if key is not None:
        rollups = rollups.filter(api_key_id=key)
    if endpoint:
        rollups = rollups.filter(endpoint=endpoint)
    if model_name:
        rollups = rollups.filter(Q(model_served=model_name) | Q(model_requested=model_name))
    if start is not None:
        rollups = rollups.filter(**{f"{time}__gte": start})
    if end is not None:
        rollups = rollups.filter(**{f"{time}__lt": end})
    return rollups


_MODEL = Coalesce(NullIf("model_served", Value("")), "model_requested")
# What totals can be split by: the expression on the rows, the hourly and the daily rollups.
SPLITS = {
    "day": (TruncDate("created_at"), TruncDate("hour"), TruncDate("day")),
    "model": (_MODEL, _MODEL, _MODEL),
    "group_id": (Coalesce("group_id", Value(0)), F("group_id"), F("group_id")),
    "api_key_id": (Coalesce("api_key_id", Value(0)), F("api_key_id"), F("api_key_id")),
    "served_by": (F("served_by"), F("served_by"), F("served_by")),
}


def _grouped(qs: QuerySet, split, totals: dict) -> list[dict]:
    if split is None:
        return [qs.order_by().aggregate(**totals)]
    return list(qs.order_by().annotate(split=split).values("split").annotate(**totals))


@dataclass(frozen=True)
class Spans:
    """A range cut where each part is read: rows at partial hours, hourly rollups at whole
    hours of partial days, daily rollups at whole days. None bounds are open."""

    rows: list[tuple]
    hours: list[tuple]
    days: tuple | None


def spans(start: datetime | None, end: datetime | None) -> Spans:
    """Cut [start, end) into the parts each source serves exactly."""
    lo_h = next_hour(start) if start is not None else None
    hi_h = hour_of(end) if end is not None else None
    if lo_h is not None and hi_h is not None and lo_h >= hi_h:
        return Spans(rows=[(start, end)], hours=[], days=None)
    rows: list[tuple[datetime | None, datetime | None]] = []
    if start is not None and start != lo_h:
        rows.append((start, lo_h))
    if end is not None and end != hi_h:
        rows.append((hi_h, end))
    lo_d = next_day(lo_h) if lo_h is not None else None
    hi_d = day_of(hi_h) if hi_h is not None else None
    if lo_d is not None and hi_d is not None and lo_d >= hi_d:
        return Spans(rows=rows, hours=[(lo_h, hi_h)], days=None)
    hours: list[tuple[datetime | None, datetime | None]] = []
    if lo_h is not None and lo_h != lo_d:
        hours.append((lo_h, lo_d))
    if hi_h is not None and hi_h != hi_d:
        hours.append((hi_d, hi_h))
    return Spans(rows=rows, hours=hours, days=(lo_d, hi_d))


def usage_totals(
    *, accounts: Sequence[int], by: str | None = None, kind: tuple = USAGE_KIND, **filters
) -> list[dict]:
    """Return the filtered usage's totals, one dict per value of `by` (a SPLITS name, sorted
    by it, the value under that name) or one dict for all (`by` None). `kind` CACHE_KIND
    totals the response cache's columns instead of TOTALS."""
    names, row_totals = kind
    zero = dict.fromkeys(names, 0)
    row_split, hour_split, day_split = SPLITS[by] if by else (None, None, None)
    start, end = filters.pop("start", None), filters.pop("end", None)
    if any(filters.get(name) for name in ROW_ONLY_FILTERS):
        cut = Spans(rows=[(start, end)], hours=[], days=None)
    else:
        cut = spans(start, end)
    parts: list[dict] = []
    for lo, hi in cut.rows:
        rows = usage_logs(accounts=accounts, start=lo, end=hi, **filters)
        parts += _grouped(rows, row_split, row_totals())
    rollup_filters = {k: v for k, v in filters.items() if k not in ROW_ONLY_FILTERS}
    rollup_filters["model_name"] = rollup_filters.pop("model", None)
    for lo, hi in cut.hours:
        hours = _rollups(UsageRollup, accounts=accounts, start=lo, end=hi, **rollup_filters)
        parts += _grouped(hours, hour_split, _rollup_totals(names))
    if cut.days is not None:
        lo, hi = cut.days
        days = _rollups(UsageDailyRollup, accounts=accounts, start=lo, end=hi, **rollup_filters)
        parts += _grouped(days, day_split, _rollup_totals(names))
    merged: dict = {}
    for part in parts:
        value = part.pop("split", None)
        into = merged.setdefault(value, dict(zero))
        for name in names:
            into[name] += int(part[name])
    if by is None:
        return [merged.get(None, dict(zero))]
    return [{by: value, **merged[value]} for value in sorted(merged)]


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


CACHE_SPLITS = {"key": "api_key_id", "group": "group_id", "model": "model"}


@dataclass(frozen=True)
class CacheReport:
    """The response cache's totals over a range: all of them, and per key, group and model
    (only those with cache activity; a missing key or group is None)."""

    totals: dict
    by_key: list[dict]
    by_group: list[dict]
    by_model: list[dict]


def cache_figures(totals: dict) -> dict:
    """The figures a tenant reads of CACHE_COLUMNS' totals: counts, the hit rate (hits of the
    requests that looked up, hits and misses; None without any) and money in micro-USD."""
    hits, misses = totals["cache_hits"], totals["cache_misses"]
    looked_up = hits + misses
    return {
        "hits": hits,
        "misses": misses,
        "bypasses": totals["cache_bypasses"],
        "hit_rate": round(hits / looked_up, 4) if looked_up else None,
        "saved_micro": totals["cache_saved_micro"],
        "spent_on_hits_micro": totals["cache_hit_cost_micro"],
    }


def _cache_active(totals: dict) -> bool:
    return any(totals[name] for name in ("cache_hits", "cache_misses", "cache_bypasses"))


def cache_report(*, accounts: Sequence[int], **filters) -> CacheReport:
    """Return the response cache's hit rate and money saved over the filtered usage, in all
    and per key, group and model: read from the rollups as usage_totals reads spend."""
    [totals] = usage_totals(accounts=accounts, kind=CACHE_KIND, **dict(filters))
    splits = {}
    for name, by in CACHE_SPLITS.items():
        rows = usage_totals(accounts=accounts, by=by, kind=CACHE_KIND, **dict(filters))
        splits[name] = [
            {name: row[by] or None, **cache_figures(row)} for row in rows if _cache_active(row)
        ]
    return CacheReport(
        totals=cache_figures(totals),
        by_key=splits["key"],
        by_group=splits["group"],
        by_model=splits["model"],
    )


def models_of_account(*, account_id: int, since: datetime) -> set[str]:
    """Every model name the account's requests since `since` (from its UTC day on) asked for
    or were served by: read from the daily rollups, which hold each day's pairs once."""
    pairs = (
        UsageDailyRollup.objects.filter(account_id=account_id, day__gte=day_of(since))
        .values_list("model_requested", "model_served")
        .distinct()
    )
    return {name for pair in pairs for name in pair if name}


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
