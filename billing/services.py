"""Control-plane writes of money: wallets, top-ups and corrections, billing settings.

A balance changes only through a billing/ledger.py step (here `credit_wallet`); the request
path runs them through billing/escrow.py, settlement on stored usage rows through
billing/settlement.py, the reaper is billing/reaper.py, reconciliation billing/reconcile.py.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.models import Account, Group
from billing import ledger
from billing.models import LedgerEntry, Wallet
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


def wallet_credit(
    *, wallet: Wallet, amount_micro: int, kind: str = LedgerEntry.Kind.TOPUP, reason: str = ""
) -> LedgerEntry:
    """Add to (or, negative, correct) a wallet's balance with a ledger entry.

    Raises billing.ledger.Refused if a correction would take it below what it holds.
    """
    entry_id = run_sync(
        ledger.credit_wallet(
            wallet.pk, amount_micro=amount_micro, kind=kind, reason=reason, now=timezone.now()
        )
    )
    return LedgerEntry.objects.get(pk=entry_id)


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
