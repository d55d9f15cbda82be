"""The reaper: resolve what a dead gateway left held (the beat task billing.expire_stale_holds)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing import receipts
from billing.feed import CrashCharge, usage_feed
from billing.ledger.reap import reap_hold, reap_reservation
from billing.ledger.sql import LEDGER_ENTRIES, RESERVATIONS, SETTLED, WALLETS
from billing.models import Receipt, Reservation, SpendHold
from core.sqlexec import ALL, Program, run_here


def expire_stale_holds(*, now: datetime | None = None) -> tuple[int, int]:
    """Resolve what a dead gateway left held; return (reservations, holds) resolved.

    A request whose usage row reached the database was settled with it (billing/settlement.py,
    same transaction), so what is still pending past its expiry belongs to a request whose
    row never arrived. One whose vendor call was sent was served: it is charged at its hold,
    marked unmeasured (billing.ledger.reap.reap_reservation / reap_hold), and given a usage row
    that says so (billing.feed: the tenant's usage lists it); one whose call never left is
    released at 0. Run after storing the usage journal (the task billing
    .expire_stale_holds does, through billing.feed), so late rows settle at their measured
    cost first.
    """
    now = now or timezone.now()
    expired_holds = list(
        SpendHold.objects.filter(status=SpendHold.Status.HELD, expires_at__lt=now).values_list(
            "request_id", flat=True
        )
    )
    # A hold outlives its request, so one expired marks its request dead: its reservations
    # (taken after it, expiring a little later) are resolved first, in this pass, and the
    # hold's receipt names every wallet debit rather than leaving one to a correction.
    reservations = sum(
        _reap(reap_reservation(pk, now=now), request_id, now=now, reservation_id=pk)
        for pk, request_id in list(
            Reservation.objects.filter(status=Reservation.Status.PENDING)
            .filter(Q(expires_at__lt=now) | Q(request_id__in=expired_holds))
            .values_list("pk", "request_id")
        )
    )
    holds = sum(
        _reap(reap_hold(request_id, now=now), request_id, now=now) for request_id in expired_holds
    )
    return reservations, holds


def _reap(
    reap: Program[bool], request_id: str, *, now: datetime, reservation_id: int | None = None
) -> bool:
    """Run a reap step with its receipt and, for a request it charged, the request's usage
    row (unmeasured, through billing.feed), all in one transaction."""
    with transaction.atomic():
        resolved, charge = run_here(
            _with_receipt(reap, request_id, now=now, reservation_id=reservation_id)
        )
        if charge is not None:
            usage_feed().record_crash_charge(charge, now=now)
    return bool(resolved)


def _with_receipt(
    reap: Program[bool], request_id: str, *, now: datetime, reservation_id: int | None = None
) -> Program[tuple[bool, CrashCharge | None]]:
    """Run a reap step and, in its transaction, write the receipt of what it charged: a
    request's settled marker the reaper inserted, receipted once (returned as the request's
    CrashCharge); or, for a reservation (`reservation_id`) committed after its request was
    receipted, that wallet debit."""
    resolved = yield from reap
    charged = yield (
        f"SELECT group_id, api_key_id, provider_cost_micro, bandwidth_micro FROM {SETTLED}"
        " WHERE request_id = %s AND source = 'reaper' AND NOT EXISTS"
        f" (SELECT 1 FROM {receipts.RECEIPTS} WHERE request_id = %s AND kind = %s)",
        (request_id, request_id, Receipt.Kind.UNMEASURED),
    )
    if charged is None:
        if resolved and reservation_id is not None:
            yield from _late_commit_receipt(reservation_id, request_id, now=now)
        return resolved, None
    group_id, api_key_id, cost, bandwidth = charged
    accounts = yield from receipts.accounts_of_groups([group_id])
    # The wallet's commits at the hold (a request may have had several calls sent): the
    # receipt names their ledger entries.
    commits = yield (
        f"SELECT e.id, -e.amount_micro FROM {LEDGER_ENTRIES} e"
        f" JOIN {RESERVATIONS} r ON r.id = e.reservation_id"
        " WHERE r.request_id = %s AND r.status = 'committed' AND r.unmeasured"
        " AND e.kind = 'commit' ORDER BY e.id",
        (request_id,),
        ALL,
    )
    debited = sum(amount for _, amount in commits)
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
            "wallet_debited_micro": debited,
        },
        wallet_entries=tuple(entry_id for entry_id, _ in commits),
        wallet_taken_micro=debited,
    )
    yield from receipts.append([draft], now=now)
    charge = CrashCharge(
        request_id=request_id,
        account_id=accounts[group_id],
        group_id=group_id,
        api_key_id=api_key_id,
        cost_micro=cost,
        bandwidth_micro=bandwidth,
        charged_at=now,
    )
    return resolved, charge


def _late_commit_receipt(reservation_id: int, request_id: str, *, now: datetime) -> Program[None]:
    """Receipt a reservation the reaper committed at its hold after its request's receipt
    was written (a call whose cancel never reached the database, or a later attempt's hold
    outliving the request's): its counters were charged before, so this receipt states only
    the wallet's debit and names its ledger entry."""
    row = yield (
        f"SELECT e.id, -e.amount_micro, r.group_id, r.api_key_id, w.account_id"
        f" FROM {LEDGER_ENTRIES} e JOIN {RESERVATIONS} r ON r.id = e.reservation_id"
        f" JOIN {WALLETS} w ON w.id = r.wallet_id"
        " WHERE r.id = %s AND r.request_id = %s AND r.status = 'committed' AND e.kind = 'commit'"
        f" AND EXISTS (SELECT 1 FROM {receipts.RECEIPTS} WHERE request_id = %s)",
        (reservation_id, request_id, request_id),
    )
    if row is None:
        return  # expired at 0, or its request's first receipt is still to come
    entry_id, debited, group_id, api_key_id, account_id = row
    draft = receipts.Draft(
        account_id=account_id,
        request_id=request_id,
        kind=Receipt.Kind.CORRECTION,
        group_id=group_id,
        api_key_id=api_key_id,
        cost_micro=0,
        bandwidth_micro=0,
        detail={"reason": "a call of this request committed at its hold after its receipt"},
        wallet_entries=(entry_id,),
        wallet_taken_micro=debited,
    )
    yield from receipts.append([draft], now=now)
