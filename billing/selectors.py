"""Reads of money: the caller's own (scoped to their account), settled markers, budget
period history and spend alerts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.db.models import Count, Q, QuerySet, Subquery, Sum

from billing.models import (
    BudgetAlert,
    BudgetPeriod,
    LedgerEntry,
    Receipt,
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


# ---------------------------------------------------------------- charges without a usage row


def corrections_between(start: datetime, end: datetime) -> dict[tuple[int, int], tuple[int, int]]:
    """What charges no usage row states moved each (account, group)'s settled cost by in
    [start, end): the reaper's charges at the hold and true-ups of late rows. Returns
    (account, group) -> (cost micro-USD, requests charged without a row)."""
    rows = (
        Receipt.objects.filter(
            settled_at__gte=start,
            settled_at__lt=end,
            kind__in=(Receipt.Kind.UNMEASURED, Receipt.Kind.TRUEUP),
            group_id__isnull=False,
        )
        .values("account_id", "group_id")
        .annotate(
            cost=Sum("cost_micro"), unmeasured=Count("id", filter=Q(kind=Receipt.Kind.UNMEASURED))
        )
    )
    found = {}
    for r in rows:
        group_id = r["group_id"]
        assert group_id is not None  # filtered above
        found[r["account_id"], group_id] = (r["cost"], r["unmeasured"])
    return found


def trued_up_between(start: datetime, end: datetime) -> list[str]:
    """The requests trued up in [start, end): their rows, stored then, charged only the
    difference to what the reaper had charged (their `trueup` receipts)."""
    return list(
        Receipt.objects.filter(
            settled_at__gte=start, settled_at__lt=end, kind=Receipt.Kind.TRUEUP
        ).values_list("request_id", flat=True)
    )


def uncollected_of(request_ids: QuerySet | Iterable[str]) -> dict[str, int]:
    """What the wallet could not cover of each request among `request_ids` that has some:
    request id -> micro-USD (the excess over its hold left uncollected; see
    billing.ledger.wallet.collect_excess). Set in the transaction that stores the request's usage
    row (its settle, or the true-up of a late row), so a usage window's rows find theirs.
    Absent requests left nothing uncollected."""
    found: dict[str, int] = defaultdict(int)
    for request_id, uncollected in Reservation.objects.filter(
        request_id__in=request_ids, uncollected_micro__gt=0
    ).values_list("request_id", "uncollected_micro"):
        found[request_id] += uncollected
    return dict(found)


def first_correction_at(after: datetime | None) -> datetime | None:
    """When the first charge without a usage row at or after `after` was made, if any."""
    corrections = Receipt.objects.filter(kind__in=(Receipt.Kind.UNMEASURED, Receipt.Kind.TRUEUP))
    if after is not None:
        corrections = corrections.filter(settled_at__gte=after)
    return corrections.order_by("settled_at").values_list("settled_at", flat=True).first()
