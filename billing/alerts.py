"""Spend alerts' delivery: each BudgetAlert settlement raised (billing.ledger.periods.raise_alerts)
is sent once through the configured sink (core.sinks), signed like usage events.

It follows the events' rules (core.sinks, usage.services.usage_events_deliver): a sender
claims an alert by moving its next try past a lease, so two workers never send one alert at
once; a failure is tried again with backoff up to MAX_DELIVERY_ATTEMPTS, a permanent one (a
4xx that waiting cannot change) fails at once. The `X-Tollgate-Event-Id` header carries the
alert's id, so a receiver that saw it already (a retry after a lost answer) can drop it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import orjson
from django.utils import timezone

from billing import services
from billing.models import BudgetAlert
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

log = logging.getLogger(__name__)

ALERT_TYPE = "budget.alert"


def alert_payload(alert: BudgetAlert) -> dict:
    """The alert as its receiver sees it."""
    period = None
    if alert.period_starts_at is not None:
        # A budget period has both bounds (raise_alerts copies them from the same row).
        assert alert.period_ends_at is not None
        period = {
            "starts_at": rfc3339(alert.period_starts_at),
            "ends_at": rfc3339(alert.period_ends_at),
        }
    return {
        "type": ALERT_TYPE,
        "id": alert.public_id,
        "account_id": alert.group.account_id,
        "group_id": alert.group_id,
        "api_key_id": alert.api_key_id,
        "threshold_pct": alert.threshold_pct,
        "spent_micro": alert.spent_micro,
        "budget_max_micro": alert.budget_max_micro,
        "period": period,
        "created_at": rfc3339(alert.created_at),
    }


def alert_body(alert: BudgetAlert) -> bytes:
    return orjson.dumps(alert_payload(alert), option=orjson.OPT_SORT_KEYS)


def budget_alert_deliver(*, alert: BudgetAlert, sink: Sink, now: datetime) -> str:
    """Send one claimed alert and record the outcome; return its delivery state."""
    attempts = alert.delivery_attempts + 1
    try:
        sink.send(event_id=alert.public_id, body=alert_body(alert))
    except Exception as exc:
        error = exc if isinstance(exc, SinkError) else SinkError(f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, SinkError):
            log.exception("budget alert %s: the %s sink failed", alert.public_id, sink.name)
        failed = error.permanent or attempts >= MAX_DELIVERY_ATTEMPTS
        log.warning(
            "budget alert %s: delivery try %d to the %s sink failed (%s)%s",
            alert.public_id,
            attempts,
            sink.name,
            error,
            "; giving up" if failed else "",
        )
        return services.budget_alert_tried(
            alert_id=alert.pk,
            attempts=attempts,
            error=str(error) or type(error).__name__,
            retry_at=None if failed else now + timedelta(seconds=backoff_s(attempts)),
        )
    return services.budget_alert_tried(alert_id=alert.pk, attempts=attempts)


def budget_alerts_deliver(
    *, now: datetime | None = None, sink: Sink | None = None
) -> DeliveryReport:
    """Send every pending alert that is due to the configured sink, once each."""
    now = now or timezone.now()
    sink = sink or configured_sink()
    counts = {state: 0 for state in BudgetAlert.Delivery.values}
    for alert_id, due_at in services.budget_alerts_due(now=now, limit=DELIVERY_BATCH):
        if not services.budget_alert_claim(
            alert_id=alert_id, due_at=due_at, now=now, lease_s=DELIVERY_LEASE_S
        ):
            continue
        alert = BudgetAlert.objects.select_related("group").get(pk=alert_id)
        counts[budget_alert_deliver(alert=alert, sink=sink, now=now)] += 1
    return DeliveryReport(
        delivered=counts[BudgetAlert.Delivery.DELIVERED],
        retrying=counts[BudgetAlert.Delivery.PENDING],
        failed=counts[BudgetAlert.Delivery.FAILED],
    )
