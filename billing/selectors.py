"""Reads of money: the caller's own (scoped to their account), settled markers, budget
period history and spend alerts."""

from __future__ import annotations

from django.db.models import Count, QuerySet, Subquery, Sum

from billing.models import (
    BudgetAlert,
    BudgetPeriod,
    LedgerEntry,
    Reservation,
    SettledRequest,
    SpendHold,
    Wallet,
)


def wallets_of_user(*, user) -> QuerySet[Wallet]:
    return Wallet.objects.filter(account__memberships__user=user).select_related("account")


def ledger_of_wallet(*, wallet: Wallet) -> QuerySet[LedgerEntry]:
    return LedgerEntry.objects.filter(wallet=wallet).order_by("-id")


def marked_bandwidth(*, request_id) -> Subquery:
    """Return a subquery of the bandwidth charged to a request (an OuterRef), NULL if none."""
    return Subquery(
        SettledRequest.objects.filter(request_id=request_id).values("bandwidth_micro")[:1]
    )


def budget_alerts(*, account, limit: int = 50) -> list[BudgetAlert]:
    """Return the account's spend alerts (groups' and keys'), newest first."""
    return list(
        BudgetAlert.objects.filter(group__account=account)
        .select_related("group", "api_key")
        .order_by("-created_at", "-id")[:limit]
    )


def budget_periods(*, group=None, api_key=None) -> QuerySet[BudgetPeriod]:
    """Return a key's closed budget periods (given `api_key`), else a group's own, newest
    first."""
    if api_key is not None:
        periods = BudgetPeriod.objects.filter(api_key=api_key)
    elif group is not None:
        periods = BudgetPeriod.objects.filter(group=group, api_key__isnull=True)
    else:
        raise ValueError("budget_periods needs a group or an api_key")
    return periods.order_by("-starts_at", "-id")


def in_flight(*, account) -> dict[str, tuple[int, int]]:
    """What the account's requests in flight hold now: (count, micro-USD) of open budget
    holds and of pending wallet reservations. Reads only open rows (partial indexes)."""
    holds = SpendHold.objects.filter(status=SpendHold.Status.HELD, group__account=account)
    reservations = Reservation.objects.filter(
        status=Reservation.Status.PENDING, wallet__account=account
    )
    return {
        "holds": _count_and_sum(holds),
        "reservations": _count_and_sum(reservations),
    }


def _count_and_sum(rows: QuerySet) -> tuple[int, int]:
    totals = rows.aggregate(n=Count("pk"), micro=Sum("amount_micro"))
    return totals["n"], totals["micro"] or 0
