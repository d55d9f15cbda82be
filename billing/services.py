"""Writes of money. Balances change only by compare-and-set UPDATEs or under row locks.

Control plane: wallets, top-ups, billing settings, and the reaper that releases what a dead
gateway left held. The request path's steps are billing/ledger.py programs (run by
billing/escrow.py); settlement rides on stored usage rows (billing/settlement.py).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.models import Account, Group
from billing import ledger
from billing.ledger import Refused
from billing.models import LedgerEntry, Reservation, SpendHold, Wallet
from billing.sqlexec import run_sync

# ---- wallets (control plane) ----


@transaction.atomic
def wallet_open(*, account: Account, opening_micro: int = 0) -> Wallet:
    wallet, _ = Wallet.objects.get_or_create(account=account)
    if opening_micro:
        wallet_credit(
            wallet=wallet,
            amount_micro=opening_micro,
            kind=LedgerEntry.Kind.OPENING,
            reason="opening balance",
        )
    return wallet


@transaction.atomic
def wallet_credit(
    *, wallet: Wallet, amount_micro: int, kind: str = LedgerEntry.Kind.TOPUP, reason: str = ""
) -> LedgerEntry:
    """Add to (or, negative, correct) a wallet's balance with a ledger entry."""
    locked = Wallet.objects.select_for_update().get(pk=wallet.pk)
    if locked.balance_micro + amount_micro < locked.reserved_micro:
        raise Refused("the correction would take the wallet below its holds")
    locked.balance_micro += amount_micro
    locked.updated_at = timezone.now()
    locked.save(update_fields=["balance_micro", "updated_at"])
    return LedgerEntry.objects.create(
        wallet=locked,
        kind=kind,
        amount_micro=amount_micro,
        balance_after_micro=locked.balance_micro,
        reason=reason,
    )


# ---- the reaper (periodic task) ----


def expire_stale_holds(*, now=None) -> tuple[int, int]:
    """Resolve what a dead gateway left held; return (reservations, holds) resolved.

    A request whose usage row reached the database was settled with it (billing/settlement.py,
    same transaction), so what is still pending past its expiry belongs to a request whose
    row never arrived. One whose vendor call was sent was served: it is charged at its hold,
    marked unmeasured (billing.ledger.reap_reservation / reap_hold); one whose call never
    left is released at 0. Run after draining the usage journal (usage.tasks does), so late
    rows settle at their measured cost first.
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


# ---- billing settings (control plane) ----


def account_billing_changed(*, account: Account) -> int:
    """Push floor(customer price / markup) to every group of the account; return the rate."""
    from accounts.services import account_bandwidth_rate_micro, group_changed

    rate = account_bandwidth_rate_micro(account=account)
    groups = list(Group.objects.filter(account=account))
    Group.objects.filter(account=account).update(bandwidth_micro_usd_per_gb=rate)
    for group in groups:
        group_changed(group=group)
    return rate


def account_billing_update(*, account: Account, price_micro_per_gb: int, markup_bp: int) -> int:
    if price_micro_per_gb < 0 or markup_bp < 1:
        raise ValueError("price must be >= 0 and markup >= 1 basis point")
    account.bandwidth_price_micro_per_gb = price_micro_per_gb
    account.markup_bp = markup_bp
    account.save(update_fields=["bandwidth_price_micro_per_gb", "markup_bp"])
    return account_billing_changed(account=account)
