"""Sending the pending deliveries, each try logged (AlertAttempt), failures retried with
exponential backoff (TOLLGATE_ALERT_RETRY_BASE_S, doubling, at most an hour apart) up to
MAX_ATTEMPTS; a permanent failure (a 4xx that waiting cannot change, a refused address)
fails at once.

A sender claims a delivery by moving its next try past a lease, in one conditional UPDATE,
so two workers never send one delivery at once (core/sinks.py's rule for the operator's
sink). The receiver may still see an event twice (a lost answer): X-Tollgate-Event-Id lets
it drop the repeat.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.channels import Outcome, post_webhook, send_email, send_to_sink
from alerts.models import AlertAttempt, AlertDelivery
from alerts.thresholds import backoff_s
from core.sealing import unseal

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
LEASE_S = 120
BATCH = 200


@dataclass(frozen=True, slots=True)
class Report:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0


def _claim(delivery_id: int, due_at: datetime, now: datetime) -> bool:
    return bool(
        AlertDelivery.objects.filter(
            pk=delivery_id, state=AlertDelivery.State.PENDING, next_attempt_at=due_at
        ).update(next_attempt_at=now + timedelta(seconds=LEASE_S))
    )


def _send(delivery: AlertDelivery) -> Outcome:
    if delivery.channel == AlertDelivery.Channel.EMAIL:
        return send_email(recipients=list(delivery.recipients), payload=delivery.payload)
    if delivery.channel == AlertDelivery.Channel.SINK:
        return send_to_sink(event_id=delivery.event_id, payload=delivery.payload)
    hook = delivery.webhook
    if hook is None:
        return Outcome(ok=False, error="the webhook was deleted", permanent=True)
    secret = unseal(
        bytes(hook.secret_sealed), version=hook.secret_version, bound_to=hook.bound_to()
    )
    return post_webhook(
        url=hook.url, secret=secret, event_id=delivery.event_id, payload=delivery.payload
    )


def delivery_try(delivery: AlertDelivery, *, now: datetime) -> str:
    """Send a claimed delivery once, log the try and record its state; return the state."""
    started = time.monotonic()
    try:
        outcome = _send(delivery)
    except Exception as exc:  # a channel's own bug must not stop the others' deliveries
        log.exception("alert delivery %s failed", delivery.pk)
        outcome = Outcome(ok=False, error=f"{type(exc).__name__}"[:200])
    attempts = delivery.attempts + 1
    if outcome.ok:
        state = AlertDelivery.State.DELIVERED
    elif outcome.permanent or attempts >= MAX_ATTEMPTS:
        state = AlertDelivery.State.FAILED
    else:
        state = AlertDelivery.State.PENDING
    base = settings.TOLLGATE["ALERT_RETRY_BASE_S"]
    with transaction.atomic():
        AlertAttempt.objects.create(
            delivery=delivery,
            number=attempts,
            status_code=outcome.status_code,
            error=outcome.error,
            duration_ms=int((time.monotonic() - started) * 1000),
            created_at=now,
        )
        AlertDelivery.objects.filter(pk=delivery.pk).update(
            state=state,
            attempts=attempts,
            last_status_code=outcome.status_code,
            last_error=outcome.error,
            delivered_at=now if outcome.ok else None,
            next_attempt_at=now + timedelta(seconds=backoff_s(attempts, base_s=base)),
        )
    if not outcome.ok:
        log.warning(
            "alert delivery %s (%s) try %d failed: %s%s",
            delivery.pk,
            delivery.event_id,
            attempts,
            outcome.error,
            "" if state == AlertDelivery.State.PENDING else "; giving up",
        )
    return state


def deliveries_send(*, now: datetime | None = None) -> Report:
    """Send every pending delivery that is due, each by one sender."""
    now = now or timezone.now()
    due = list(
        AlertDelivery.objects.filter(state=AlertDelivery.State.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", "next_attempt_at")[:BATCH]
    )
    counts = {state: 0 for state in AlertDelivery.State.values}
    for delivery_id, due_at in due:
        if not _claim(delivery_id, due_at, now):
            continue
        delivery = AlertDelivery.objects.select_related("webhook").get(pk=delivery_id)
        counts[delivery_try(delivery, now=now)] += 1
    return Report(
        delivered=counts[AlertDelivery.State.DELIVERED],
        retrying=counts[AlertDelivery.State.PENDING],
        failed=counts[AlertDelivery.State.FAILED],
    )
