"""What the dashboard's pages show, read in one place per page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Account, ApiKey, Group, Membership
from billing.models import BudgetPeriod, Wallet
from billing.selectors import budget_periods
from byok.models import KeyPool, TeamKey
from core import money
from providers.models import ProviderModel
from usage.selectors import usage_totals, usage_zero_totals

PAST_PERIODS = 6  # closed budget periods shown per group


def account_zone(account: Account) -> ZoneInfo:
    return ZoneInfo(account.time_zone or "UTC")


def local_day_start(account: Account, now: datetime | None = None) -> datetime:
    """Return the start of the account's current day (its time zone), as an aware instant."""
    zone = account_zone(account)
    local = (now or timezone.now()).astimezone(zone)
    return datetime.combine(local.date(), time.min, tzinfo=zone)


def spend_micro(row: dict) -> int:
    """What a usage total cost the tenant (core.money.spend_micro)."""
    return money.spend_micro(
        cost_micro=row["provider_cost_micro"], bandwidth_micro=row["bandwidth_charge_micro"]
    )


@dataclass(frozen=True)
class GroupBudget:
    group: Group
    today_micro: int
    requests_today: int
    errors_today: int
    period_micro: int  # what counts against the budget now (0 once a period has ended)
    past_periods: list[BudgetPeriod]

    @property
    def left_micro(self) -> int | None:
        g = self.group
        if g.budget_max_micro is None:
            return None
        return max(0, g.budget_max_micro - self.period_micro - g.reserved_micro)


@dataclass(frozen=True)
class Overview:
    wallet: Wallet | None
    groups: list[GroupBudget]
    today_micro: int
    requests_today: int
    errors_today: int
    day_start: datetime


def _today_by_group(account: Account, since: datetime) -> dict[int, dict]:
    rows = usage_totals(accounts=[account.pk], by="group_id", start=since)
    return {row["group_id"]: row for row in rows}


def overview(*, account: Account, now: datetime | None = None) -> Overview:
    """Return the account's wallet, each group's spend today and this period, and totals."""
    now = now or timezone.now()
    since = local_day_start(account, now)
    today = _today_by_group(account, since)
    groups = []
    for group in Group.objects.filter(account=account).order_by("name"):
        t = today.get(group.pk, {})
        groups.append(
            GroupBudget(
                group=group,
                today_micro=spend_micro(t) if t else 0,
                requests_today=t.get("requests", 0),
                errors_today=t.get("errors", 0),
                period_micro=group.period_spent_micro(now),
                past_periods=list(budget_periods(group=group)[:PAST_PERIODS]),
            )
        )
    return Overview(
        wallet=Wallet.objects.filter(account=account).first(),
        groups=groups,
        today_micro=sum(g.today_micro for g in groups),
        requests_today=sum(g.requests_today for g in groups),
        errors_today=sum(g.errors_today for g in groups),
        day_start=since,
    )


def groups_of_account(*, account: Account) -> QuerySet[Group]:
    return Group.objects.filter(account=account).order_by("name")


def api_keys_of_account(*, account: Account) -> QuerySet[ApiKey]:
    return (
        ApiKey.objects.filter(group__account=account)
        .select_related("group")
        .order_by("revoked_at", "-created_at")
    )


def pools_of_account(*, account: Account) -> QuerySet[KeyPool]:
    return (
        KeyPool.objects.filter(group__account=account)
        .select_related("group")
        .prefetch_related("keys")
        .order_by("group__name", "provider")
    )


def chart_window(*, days: int, now: datetime | None = None) -> datetime:
    """Return the start of a chart window of `days` UTC days ending today."""
    today = (now or timezone.now()).astimezone(ZoneInfo("UTC")).date()
    return datetime.combine(today - timedelta(days=days - 1), time.min, tzinfo=ZoneInfo("UTC"))


def every_day(rows: list[dict], *, start: datetime, days: int) -> list[dict]:
    """Return per-day totals with a zero row for each day of the window without traffic."""
    by_day = {row["day"]: row for row in rows}
    zero = usage_zero_totals()
    first = start.date()
    filled = []
    for offset in range(days):
        day = first + timedelta(days=offset)
        filled.append(by_day.get(day) or {**zero, "day": day})
    return filled


def model_names() -> list[str]:
    """Every model name clients may ask for (enabled profiles), for the key form's hints."""
    return sorted(
        set(ProviderModel.objects.filter(profile__enabled=True).values_list("name", flat=True))
    )


@dataclass(frozen=True)
class PoolState:
    """A team key pool as its group's requests meet it now."""

    pool: KeyPool
    keys: list[TeamKey]
    usable: int  # active keys not benched after a vendor refusal

    @property
    def refuses_everything(self) -> bool:
        """No usable key and no fallback: every request for this provider is LM-3021."""
        return self.usable == 0 and not self.pool.fallback


def pool_states(*, account: Account, now: datetime | None = None) -> list[PoolState]:
    now = now or timezone.now()
    states = []
    for pool in pools_of_account(account=account):
        keys = sorted(pool.keys.all(), key=lambda k: k.pk)
        usable = sum(
            1
            for k in keys
            if k.status == TeamKey.Status.ACTIVE
            and (k.benched_until is None or k.benched_until <= now)
        )
        states.append(PoolState(pool=pool, keys=keys, usable=usable))
    return states


def members_of_account(*, account: Account) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(account=account).select_related("user").order_by("user__username")
    )
