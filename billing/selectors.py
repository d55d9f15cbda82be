"""Reads of money: the caller's own (scoped to their account), and settled markers."""

from __future__ import annotations

from django.db.models import QuerySet, Subquery

from billing.models import LedgerEntry, SettledRequest, Wallet


def wallets_of_user(*, user) -> QuerySet[Wallet]:
    return Wallet.objects.filter(account__memberships__user=user).select_related("account")


def ledger_of_wallet(*, wallet: Wallet) -> QuerySet[LedgerEntry]:
    return LedgerEntry.objects.filter(wallet=wallet).order_by("-id")


def marked_bandwidth(*, request_id) -> Subquery:
    """Return a subquery of the bandwidth charged to a request (an OuterRef), NULL if none."""
    return Subquery(
        SettledRequest.objects.filter(request_id=request_id).values("bandwidth_micro")[:1]
    )
