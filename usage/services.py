"""Usage writes run by the periodic tasks: events per window, their delivery, the journal
drain, and the usage log as billing's periodic work reads it (billing.feed).

Windows. Both the event flush and reconciliation walk the usage log in windows of
TOLLGATE_USAGE_WINDOW_S seconds of `stored_at` (when a row reached the database), aligned to
the epoch. A window is handled once it ended more than TOLLGATE_USAGE_GRACE_S ago (the grace
covers a writer's transaction still committing rows stamped inside it), and then never again:
its end is the job's cursor. A row journaled late — a killed gateway's, claimed minutes later
— is stored late and so counted in the window it arrived in: never dropped, never twice.

Exactly once. Each job locks its cursor row (SELECT ... FOR UPDATE) while it handles a window
and advances the cursor in the same transaction, so a retried task or a second worker finds
the window done. UsageEvent's unique (window_start, group_id) is the backstop where row locks
do not exist (SQLite): a second insert of a window's events is ignored, never duplicated.

Reconciliation is billing's (billing/reconcile.py, the task billing.reconcile_bandwidth: a
row nobody settled is charged, a marker that disagrees with its row corrected, one
SpendAdjustment per group and window). Usage walks the windows under its cursor and hands
each window's rows whose charge may be off to billing's reconciler. A rerun of a window
finds nothing to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Max, Min, OuterRef, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from jsonschema import Draft202012Validator

from billing.feed import CrashCharge, LoggedCharge, WindowReconciler
from billing.selectors import (
    corrections_between,
    first_correction_at,
    marked_bandwidth,
    trued_up_between,
    uncollected_of,
)
from core.config import tollgate
from core.sinks import (
    DELIVERY_BATCH,
    DELIVERY_LEASE_S,
    MAX_DELIVERY_ATTEMPTS,
    DeliveryReport,
    Sink,
    SinkError,
    backoff_s,
    configured_sink,
    rfc3339,
)
from usage.crash_rows import store_crash_charge
from usage.models import Measurement, UsageCursor, UsageEvent, UsageLog
from usage.writer import drain_journal_sync

log = logging.getLogger(__name__)

EVENTS_CURSOR = "events"
RECONCILE_CURSOR = "reconcile"
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "usage_event.v1.json"
SCHEMA_ID = "tollgate.usage_event.v1"
UNITS = (
    "tokens_in",
    "tokens_out",
    "provider_cost_micro_usd",
    "bytes_in",
    "bytes_out",
    "byok_tokens_in",
    "byok_tokens_out",
    # Web acquisition (a compatible extension of v1: see the schema's description).
    "web_pages",
    "web_rendered_pages",
    "web_queries",
    # What the wallet could not cover (a compatible extension of v1, like the web units).
    "uncollected_micro_usd",
)

T = TypeVar("T")


# ---------------------------------------------------------------- windows


@dataclass(frozen=True, slots=True)
class Window:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())


def window_floor(moment: datetime, *, window_s: int) -> datetime:
    """Return the start of the epoch-aligned window holding `moment`."""
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % window_s, tz=UTC)


def _next_closed_window(position: datetime | None, *, now: datetime) -> Window | None:
    """Return the first window after `position` that has rows (or charges without a row:
    billing's corrections) and is closed, or None."""
    window_s = tollgate().usage_window_s
    rows = UsageLog.objects.filter(group_id__isnull=False)
    if position is not None:
        rows = rows.filter(stored_at__gte=position)
    starts = [
        moment
        for moment in (
            rows.order_by("stored_at").values_list("stored_at", flat=True).first(),
            first_correction_at(position),
        )
        if moment is not None
    ]
    if not starts:
        return None
    start = window_floor(min(starts), window_s=window_s)
    window = Window(
        start=max(start, position) if position else start, end=start + timedelta(seconds=window_s)
    )
    if window.end + timedelta(seconds=tollgate().usage_grace_s) > now:
        return None
    return window


def _walk(name: str, handle: Callable[[Window], T], *, now: datetime | None) -> list[T]:
    """Run `handle` once on each closed window after cursor `name`, in order.

    The cursor row stays locked while a window is handled and moves past it in the same
    transaction: concurrent or retried runs wait, then find the window done.
    """
    now = now or timezone.now()
    UsageCursor.objects.get_or_create(name=name)
    results: list[T] = []
    while True:
        with transaction.atomic():
            cursor = UsageCursor.objects.select_for_update().get(name=name)
            window = _next_closed_window(cursor.position, now=now)
            if window is None:
                return results
            results.append(handle(window))
            cursor.position = window.end
            cursor.save(update_fields=["position"])


def _rows_in(window: Window):
    # Unmeasured rows (usage/crash_rows.py) are charges these readers count from billing's
    # receipts and markers already.
    return UsageLog.objects.filter(
        stored_at__gte=window.start, stored_at__lt=window.end, group_id__isnull=False
    ).exclude(measurement=Measurement.UNMEASURED)


# ---------------------------------------------------------------- events


@lru_cache(maxsize=1)
def event_schema_validator() -> Draft202012Validator:
    schema = orjson.loads(SCHEMA_PATH.read_bytes())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _sum(field: str, **extra) -> Coalesce:
    return Coalesce(Sum(field, **extra), Value(0))


def window_usage(window: Window) -> list[dict]:
    """Return one event payload per (account, group) with rows stored in the window, or a
    charge made in it without a row.

    `provider_cost_micro_usd` is what the window moved the group's settled cost by: its rows'
    cost, plus the reaper's charges at the hold of served requests whose row never arrived,
    plus the true-ups of those that arrived late (negative when the hold was more than the
    measured cost), less what the wallet could not cover: that is `uncollected_micro_usd`,
    stated on its own and never as cost (the group's settled cost never moved by it).
    `requests` counts the charges without a row too.
    """
    billable = Q(upstream_sent=True)  # bytes of refusals are never billed
    totals = (
        _rows_in(window)
        .filter(account_id__isnull=False)
        .values("account_id", "group_id")
        .annotate(
            requests=Count("id"),
            tokens_in=_sum("tokens_in"),
            tokens_out=_sum("tokens_out"),
            provider_cost_micro_usd=_sum("provider_cost_micro"),
            bytes_in=_sum("bytes_in", filter=billable),
            bytes_out=_sum("bytes_out", filter=billable),
            byok_tokens_in=_sum("byok_tokens_in"),
            byok_tokens_out=_sum("byok_tokens_out"),
            web_pages=_sum("web_pages"),
            web_rendered_pages=_sum("web_rendered_pages"),
            web_queries=_sum("web_queries"),
            first_request_at=Min("created_at"),
            last_request_at=Max("created_at"),
        )
    )
    by_owner: dict[tuple[int, int], dict] = {
        (row["account_id"], row["group_id"]): row | {"uncollected_micro_usd": 0} for row in totals
    }
    # A trued-up row charged only the difference to the hold charged before (its receipt,
    # counted with the corrections below), not its own cost.
    trued_up_ids = trued_up_between(window.start, window.end)
    trued_up = (
        _rows_in(window)
        .filter(request_id__in=trued_up_ids)
        .values("account_id", "group_id")
        .annotate(cost=_sum("provider_cost_micro"))
    )
    for row in trued_up:
        by_owner[row["account_id"], row["group_id"]]["provider_cost_micro_usd"] -= row["cost"]
    # A row's cost above its hold that the wallet could not cover was never charged: it moves
    # from the cost to its own unit. It was left out when the row was stored (settled or
    # trued up), so in the row's own window; a true-up's receipt already left it out.
    costly = _rows_in(window).filter(account_id__isnull=False, provider_cost_micro__gt=0)
    uncollected = uncollected_of(costly.values("request_id"))
    if uncollected:
        trued = set(trued_up_ids)
        for request_id, account_id, group_id in costly.filter(
            request_id__in=list(uncollected)
        ).values_list("request_id", "account_id", "group_id"):
            row = by_owner[account_id, group_id]
            row["uncollected_micro_usd"] += uncollected[request_id]
            if request_id not in trued:
                row["provider_cost_micro_usd"] -= uncollected[request_id]
    for owner, (cost, unmeasured) in corrections_between(window.start, window.end).items():
        row = by_owner.setdefault(
            owner,
            {"account_id": owner[0], "group_id": owner[1], "requests": 0} | dict.fromkeys(UNITS, 0),
        )
        row["provider_cost_micro_usd"] += cost
        row["requests"] += unmeasured
    payloads = []
    for _, row in sorted(by_owner.items(), key=lambda item: item[0][1]):
        payload = {
            "schema": SCHEMA_ID,
            "event_id": f"ue_{row['group_id']}_{int(window.start.timestamp())}",
            "account_id": row["account_id"],
            "group_id": row["group_id"],
            "window_start": rfc3339(window.start),
            "window_end": rfc3339(window.end),
            "window_s": window.seconds,
            "requests": row["requests"],
            "units": {unit: int(row[unit]) for unit in UNITS},
        }
        if row.get("first_request_at") is not None:  # a window of corrections has no rows
            payload["first_request_at"] = rfc3339(row["first_request_at"])
            payload["last_request_at"] = rfc3339(row["last_request_at"])
        payloads.append(payload)
    return payloads


def _emit(window: Window) -> int:
    payloads = window_usage(window)
    validator = event_schema_validator()
    for payload in payloads:
        validator.validate(payload)
    UsageEvent.objects.bulk_create(
        [
            UsageEvent(
                window_start=window.start,
                window_s=window.seconds,
                account_id=payload["account_id"],
                group_id=payload["group_id"],
                payload=payload,
            )
            for payload in payloads
        ],
        ignore_conflicts=True,  # the (window_start, group_id) backstop: never a duplicate
    )
    return len(payloads)


def usage_events_flush(*, now: datetime | None = None) -> int:
    """Write the events of every closed window not flushed yet; return how many."""
    emitted = sum(_walk(EVENTS_CURSOR, _emit, now=now))
    if emitted:
        log.info("usage events: %d written", emitted)
    return emitted


# ---------------------------------------------------------------- delivery


def event_body(event: UsageEvent) -> bytes:
    return orjson.dumps(event.payload, option=orjson.OPT_SORT_KEYS)


def _claim(event_id: int, due_at: datetime | None, *, now: datetime) -> bool:
    """Take an event for one delivery try; False if another sender took it first."""
    due = Q(next_attempt_at__isnull=True) if due_at is None else Q(next_attempt_at=due_at)
    return bool(
        UsageEvent.objects.filter(due, pk=event_id, delivery=UsageEvent.Delivery.PENDING).update(
            next_attempt_at=now + timedelta(seconds=DELIVERY_LEASE_S)
        )
    )


def usage_event_deliver(*, event: UsageEvent, sink: Sink, now: datetime) -> str:
    """Send one claimed event and record the outcome; return its delivery state."""
    attempts = event.delivery_attempts + 1
    try:
        sink.send(event_id=event.payload["event_id"], body=event_body(event))
    except Exception as exc:
        error = exc if isinstance(exc, SinkError) else SinkError(f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, SinkError):
            log.exception("usage event %s: the %s sink failed", event.pk, sink.name)
        failed = error.permanent or attempts >= MAX_DELIVERY_ATTEMPTS
        state = UsageEvent.Delivery.FAILED if failed else UsageEvent.Delivery.PENDING
        UsageEvent.objects.filter(pk=event.pk).update(
            delivery=state,
            delivery_attempts=attempts,
            last_error=str(error)[:200],
            next_attempt_at=None if failed else now + timedelta(seconds=backoff_s(attempts)),
        )
        log.warning(
            "usage event %s: delivery try %d to the %s sink failed (%s)%s",
            event.payload["event_id"],
            attempts,
            sink.name,
            error,
            "; giving up" if failed else "",
        )
        return state
    UsageEvent.objects.filter(pk=event.pk).update(
        delivery=UsageEvent.Delivery.DELIVERED,
        delivery_attempts=attempts,
        last_error="",
        delivered_at=timezone.now(),
        next_attempt_at=None,
    )
    return UsageEvent.Delivery.DELIVERED


def usage_events_deliver(
    *, now: datetime | None = None, sink: Sink | None = None
) -> DeliveryReport:
    """Send every pending event that is due to the configured sink, once each."""
    now = now or timezone.now()
    sink = sink or configured_sink()
    due = list(
        UsageEvent.objects.filter(delivery=UsageEvent.Delivery.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .order_by("id")
        .values_list("pk", "next_attempt_at")[:DELIVERY_BATCH]
    )
    counts = {state: 0 for state in UsageEvent.Delivery.values}
    for event_id, due_at in due:
        if not _claim(event_id, due_at, now=now):
            continue
        event = UsageEvent.objects.get(pk=event_id)
        counts[usage_event_deliver(event=event, sink=sink, now=now)] += 1
    return DeliveryReport(
        delivered=counts[UsageEvent.Delivery.DELIVERED],
        retrying=counts[UsageEvent.Delivery.PENDING],
        failed=counts[UsageEvent.Delivery.FAILED],
    )


def usage_events_redeliver(*, event_ids: Iterable[int]) -> int:
    """Queue events again (an operator's action after fixing the sink); return how many."""
    return (
        UsageEvent.objects.filter(pk__in=list(event_ids))
        .exclude(delivery=UsageEvent.Delivery.PENDING)
        .update(delivery=UsageEvent.Delivery.PENDING, next_attempt_at=None, delivery_attempts=0)
    )


# ---------------------------------------------------------------- reconciliation


def bandwidth_reconcile_window(window: Window, *, reconcile: WindowReconciler) -> list:
    """Hand a window's rows whose charge may be off to billing's `reconcile`; return the drift.

    The database narrows the window to rows without a settled marker that owe something and
    rows whose marker's bandwidth disagrees; billing decides under its own locks.
    """
    rows = _rows_in(window)
    off = list(
        rows.annotate(charged=marked_bandwidth(request_id=OuterRef("request_id")))
        .filter(
            Q(charged__isnull=True)
            & (Q(bandwidth_charge_micro__gt=0) | Q(provider_cost_micro__gt=0))
            | (Q(charged__isnull=False) & ~Q(charged=F("bandwidth_charge_micro")))
        )
        .values_list(
            "request_id",
            "group_id",
            "api_key_id",
            "bandwidth_charge_micro",
            "provider_cost_micro",
            "charged",
        )
    )
    if not off:
        return []
    logged_by_group = dict(
        rows.filter(group_id__in={row[1] for row in off})
        .values("group_id")
        .annotate(total=_sum("bandwidth_charge_micro"))
        .values_list("group_id", "total")
    )
    return reconcile(
        window_start=window.start,
        rows=[LoggedCharge(*row) for row in off],
        logged_by_group=logged_by_group,
    )


def bandwidth_windows_reconcile(
    reconcile: WindowReconciler, *, now: datetime | None = None
) -> list:
    """Hand every closed window not reconciled yet to `reconcile`, once each, in order;
    return the drift found."""
    return [
        drift
        for drifts in _walk(
            RECONCILE_CURSOR,
            lambda window: bandwidth_reconcile_window(window, reconcile=reconcile),
            now=now,
        )
        for drift in drifts
    ]


# ---------------------------------------------------------------- the journal


def usage_journal_drain() -> int:
    """Store every journaled usage row (a dead gateway's too); return how many were new."""
    if not settings.REDIS_URL:
        return 0  # no journal: embedded gateways flush their own memory
    return drain_journal_sync(settings.REDIS_URL)


# ---------------------------------------------------------------- billing's view of usage


class UsageLogFeed:
    """The usage log as billing's periodic work reads it (billing.feed.UsageFeed), registered
    by usage/apps.py: billing never imports usage."""

    def store_journaled(self) -> int:
        return usage_journal_drain()

    def record_crash_charge(self, charge: CrashCharge, *, now: datetime) -> None:
        store_crash_charge(charge, now=now)

    def reconcile_windows(
        self, reconcile: WindowReconciler, *, now: datetime | None = None
    ) -> list:
        return bandwidth_windows_reconcile(reconcile, now=now)
