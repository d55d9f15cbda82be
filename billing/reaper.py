"""The reaper: resolve what a dead gateway left held (the beat task billing.expire_stale_holds)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from billing import ledger, receipts
from billing.models import Receipt, Reservation, SpendHold
from core.sqlexec import Program, run_sync


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
        bool(run_sync(_with_receipt(ledger.reap_reservation(pk, now=now), request_id, now=now)))
        for pk, request_id in list(
            Reservation.objects.filter(
                status=Reservation.Status.PENDING, expires_at__lt=now
            ).values_list("pk", "request_id")
        )
    )
    holds = sum(
        bool(run_sync(_with_receipt(ledger.reap_hold(request_id, now=now), request_id, now=now)))
        for request_id in list(
            SpendHold.objects.filter(status=SpendHold.Status.HELD, expires_at__lt=now).values_list(
                "request_id", flat=True
            )
        )
    )
    return reservations, holds


def _with_receipt(reap: Program[bool], request_id: str, *, now: datetime) -> Program[bool]:
    """Run a reap step and, in its transaction, write the receipt of what it charged: a
    request's settled marker the reaper inserted, receipted once."""
    resolved = yield from reap
    charged = yield (
        f"SELECT group_id, api_key_id, provider_cost_micro, bandwidth_micro FROM {ledger.SETTLED}"
        " WHERE request_id = %s AND source = 'reaper' AND NOT EXISTS"
        f" (SELECT 1 FROM {receipts.RECEIPTS} WHERE request_id = %s AND kind = %s)",
        (request_id, request_id, Receipt.Kind.UNMEASURED),
    )
    if charged is None:
        return resolved
    group_id, api_key_id, cost, bandwidth = charged
    accounts = yield from receipts.accounts_of_groups([group_id])
    debited = yield (
        f"SELECT COALESCE(SUM(committed_micro), 0) FROM {ledger.RESERVATIONS}"
        " WHERE request_id = %s AND status = 'committed' AND unmeasured",
        (request_id,),
    )
    draft = receipts.Draft(
        account_id=accounts[group_id],
        request_id=request_id,
        kind=Receipt.Kind.UNMEASURED,
        group_id=group_id,
        api_key_id=api_key_id,
        cost_micro=cost,
        bandwidth_micro=bandwidth,
        detail={
            "reason": "served, but its usage row never arrived: charged at its hold",
            "wallet_debited_micro": int(debited[0]),
        },
    )
    yield from receipts.append([draft], now=now)
    return resolved
