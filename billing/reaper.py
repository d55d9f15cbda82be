"""The reaper: resolve what a dead gateway left held (the beat task billing.expire_stale_holds)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from billing import ledger
from billing.models import Reservation, SpendHold
from core.sqlexec import run_sync


def expire_stale_holds(*, now: datetime | None = None) -> tuple[int, int]:
    """Resolve what a dead gateway left held; return (reservations, holds) resolved.

    A request whose usage row reached the database was settled with it (billing/settlement.py,
    same transaction), so what is still pending past its expiry belongs to a request whose
    row never arrived. One whose vendor call was sent was served: it is charged at its hold,
    marked unmeasured (billing.ledger.reap_reservation / reap_hold); one whose call never
    left is released at 0. Run after storing the usage journal (the task billing
    .expire_stale_holds does, through billing.feed), so late rows settle at their measured
    cost first.
    """
    now = now or timezone.now()
    reservations = sum(
        bool(run_sync(ledger.reap_reservation(reservation_id, now=now)))
        for reservation_id in list(
            Reservation.objects.filter(
                status=Reservation.Status.PENDING, expires_at__lt=now
            ).values_list("pk", flat=True)
        )
    )
    holds = sum(
        bool(run_sync(ledger.reap_hold(request_id, now=now)))
        for request_id in list(
            SpendHold.objects.filter(status=SpendHold.Status.HELD, expires_at__lt=now).values_list(
                "request_id", flat=True
            )
        )
    )
    return reservations, holds
