"""Reads of money, scoped to the caller's account."""

from __future__ import annotations

from django.db.models import QuerySet

from billing.models import LedgerEntry, Wallet


def wallets_of_user(*, user) -> QuerySet[Wallet]:
    return Wallet.objects.filter(account__memberships__user=user).select_related("account")


def ledger_of_wallet(*, wallet: Wallet) -> QuerySet[LedgerEntry]:
    return LedgerEntry.objects.filter(wallet=wallet).order_by("-id")
