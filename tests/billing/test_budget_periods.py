"""Budgets with a period: spent is the current day's or month's, reset at the boundary in the
account's time zone with the closed period kept, exact to the micro-USD.

A test crosses a boundary by moving the current period's bounds into the past (the period
ended one second ago), as the clock would: nothing else about the row changes.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import openai
import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services as accounts
from accounts.models import Account, ApiKey, Group
from accounts.periods import period_bounds
from billing.ledger.fused import HOLD_MANY_STATEMENT, HOLD_ONE_STATEMENT
from billing.ledger.holds import Hold, take_hold
from billing.ledger.sql import Refused
from billing.models import SpendHold
from billing.selectors import budget_periods
from billing.services import budget_periods_roll
from core.sqlexec import run_sync
from tests.billing.test_money_e2e import COST, ask, worst_case
from tests.support.processes import start_worker
from tests.support.services import requires_postgres, requires_redis
from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store
from tests.support.waits import wait_until


def rid() -> str:
    return f"req-{uuid.uuid4().hex}"


def with_period(model, pk: int, period: str = "daily", **fields):
    """Give a group or key a budget period through the service the API and admin use."""
    if model is Group:
        return accounts.group_update(group=Group.objects.get(pk=pk), budget_period=period, **fields)
    return accounts.api_key_update(
        api_key=ApiKey.objects.get(pk=pk), budget_period=period, **fields
    )


def end_period(model, pk: int) -> tuple[datetime, datetime]:
    """Make the current period one that ended a second ago (a day long); return its bounds."""
    ends = timezone.now() - timedelta(seconds=1)
    starts = ends - timedelta(days=1)
    model.objects.filter(pk=pk).update(period_starts_at=starts, period_ends_at=ends)
    return starts, ends


def spend(tenant, cost_micro: int, *, key: bool = True) -> str:
    """Store a usage row that owes `cost_micro`: settlement charges it as a gateway's would."""
    request_id = rid()
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id if key else None,
            request_id=request_id,
            provider_cost_micro=cost_micro,
        )
    )
    return request_id


def history(**owner) -> list[tuple]:
    return [
        (p.starts_at, p.ends_at, p.budget_max_micro, p.spent_micro, p.budget_period)
        for p in budget_periods(**owner)
    ]


# ---------------------------------------------------------------- on the request path


def test_a_daily_group_budget_refuses_at_its_limit_and_admits_right_after_the_boundary(stack):
    tenant = stack.tenant(wallet_micro=0, invoiced=True)
    hold = worst_case(stack, tenant, max_tokens=100)
    budget = hold + COST - 1  # room for one request's hold, not for a second after its spend
    with_period(Group, tenant.group_id, budget_max_micro=budget)
    stack.gateway.reload()
    group = Group.objects.get(pk=tenant.group_id)
    today = period_bounds("daily", "UTC", timezone.now())
    assert (group.period_starts_at, group.period_ends_at) == today

    ask(stack, tenant, max_tokens=100)
    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant, max_tokens=100)
    assert refused.value.status_code == 402 and refused.value.body["code"] == "LM-4001"
    assert refused.value.body["message"] == (
        f"Budget exhausted (group budget); this daily budget resets at {today[1].isoformat()}."
    )

    starts, ends = end_period(Group, tenant.group_id)
    # Nothing rolled the period yet: the hold reads the ended period's spent as 0.
    assert Group.objects.get(pk=tenant.group_id).spent_micro == COST
    ask(stack, tenant, max_tokens=100)

    group = Group.objects.get(pk=tenant.group_id)
    # Settlement rolled the period before charging: the new charge is the new period's.
    assert (group.spent_micro, group.reserved_micro, group.settled_micro) == (COST, 0, 2 * COST)
    assert (group.period_starts_at, group.period_ends_at) == period_bounds(
        "daily", "UTC", timezone.now()
    )
    assert history(group=group) == [(starts, ends, budget, COST, "daily")]
    assert len(stack.stub.vendor_calls()) == 2


def test_a_key_budget_period_refuses_then_admits_after_its_boundary(stack):
    tenant = stack.tenant(wallet_micro=0, invoiced=True)
    hold = worst_case(stack, tenant, max_tokens=100)
    budget = hold + COST - 1
    with_period(ApiKey, tenant.api_key_id, budget_max_micro=budget)
    stack.gateway.reload()

    ask(stack, tenant, max_tokens=100)
    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant, max_tokens=100)
    assert refused.value.body["code"] == "LM-4001"
    assert "(key budget); this daily budget resets at" in refused.value.body["message"]

    starts, ends = end_period(ApiKey, tenant.api_key_id)
    ask(stack, tenant, max_tokens=100)

    key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (key.spent_micro, key.reserved_micro) == (COST, 0)
    assert history(api_key=key) == [(starts, ends, budget, COST, "daily")]
    # The group has no period: its spent is the lifetime's, and no group history exists.
    assert Group.objects.get(pk=tenant.group_id).spent_micro == 2 * COST
    assert history(group=key.group) == []


# ---------------------------------------------------------------- the ledger's steps


@pytest.mark.django_db
def test_the_roll_records_the_closing_spend_and_starts_the_period_at_zero():
    tenant = make_tenant(budget_micro=1_000)
    with_period(Group, tenant.group_id)
    spend(tenant, 123)
    spend(tenant, 77)
    starts, ends = end_period(Group, tenant.group_id)
    now = timezone.now()
    ended = Group.objects.get(pk=tenant.group_id)
    assert (ended.spent_micro, ended.period_spent_micro(now)) == (200, 0)  # as holds read it

    assert budget_periods_roll(now=now) == 1

    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro) == (0, 200)
    assert (group.period_starts_at, group.period_ends_at) == period_bounds("daily", "UTC", now)
    assert history(group=group) == [(starts, ends, 1_000, 200, "daily")]
    assert budget_periods_roll(now=now) == 0  # once: the new period has not ended
    assert len(history(group=group)) == 1


@pytest.mark.django_db
def test_a_charge_settled_after_the_boundary_lands_in_the_new_period():
    tenant = make_tenant(budget_micro=1_000)
    with_period(Group, tenant.group_id)
    with_period(ApiKey, tenant.api_key_id, budget_max_micro=500)
    spend(tenant, 300)
    g_starts, g_ends = end_period(Group, tenant.group_id)
    k_starts, k_ends = end_period(ApiKey, tenant.api_key_id)

    spend(tenant, 40)  # no roll ran: settlement rolls both before it charges

    group = Group.objects.get(pk=tenant.group_id)
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (group.spent_micro, key.spent_micro, group.settled_micro) == (40, 40, 340)
    assert history(group=group) == [(g_starts, g_ends, 1_000, 300, "daily")]
    assert history(api_key=key) == [(k_starts, k_ends, 500, 300, "daily")]
    assert period_bounds("daily", "UTC", timezone.now()) == (
        key.period_starts_at,
        key.period_ends_at,
    )


@requires_postgres  # the one-statement holds are PostgreSQL's data-modifying CTEs
@pytest.mark.django_db
def test_holds_of_every_form_see_a_fresh_budget_once_the_period_ended():
    tenant = make_tenant(budget_micro=100)
    with_period(Group, tenant.group_id)
    with_period(ApiKey, tenant.api_key_id, budget_max_micro=100)
    Group.objects.filter(pk=tenant.group_id).update(spent_micro=100)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(spent_micro=100)
    now = timezone.now()

    def program_hold() -> bool:
        step = Hold(rid(), tenant.group_id, tenant.api_key_id, True, 60)
        try:
            run_sync(take_hold(step, now=now, ttl_s=60))
        except Refused:
            return False
        return True

    def one_statement_hold() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                HOLD_ONE_STATEMENT,
                {"request": rid(), "group": tenant.group_id, "key": tenant.api_key_id,
                 "amount": 10, "now": now, "expires": now + timedelta(seconds=60)},
            )  # fmt: skip
            return cursor.fetchone() is not None

    def many_statement_hold() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                HOLD_MANY_STATEMENT,
                {"requests": [rid(), rid()], "amounts": [10, 20], "keys": [tenant.api_key_id] * 2,
                 "group": tenant.group_id, "now": now, "expires": now + timedelta(seconds=60)},
            )  # fmt: skip
            return len(cursor.fetchall()) == 2

    # The budgets are spent: every form of hold refuses.
    assert (program_hold(), one_statement_hold(), many_statement_hold()) == (False,) * 3

    end_period(Group, tenant.group_id)
    end_period(ApiKey, tenant.api_key_id)
    assert (program_hold(), one_statement_hold(), many_statement_hold()) == (True,) * 3
    group = Group.objects.get(pk=tenant.group_id)
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    # Taken on the fresh budget, before any roll: the old spent is still there to record.
    assert (group.spent_micro, group.reserved_micro) == (100, 60 + 10 + 30)
    assert (key.spent_micro, key.reserved_micro) == (100, 60)
    assert SpendHold.objects.filter(group_id=tenant.group_id).count() == 4


@pytest.mark.django_db
def test_a_group_without_a_period_never_rolls():
    tenant = make_tenant(budget_micro=1_000)
    spend(tenant, 250)

    assert budget_periods_roll(now=timezone.now() + timedelta(days=400)) == 0
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.period_starts_at, group.period_ends_at) == (250, None, None)


@pytest.mark.django_db
def test_monthly_bounds_follow_the_accounts_time_zone():
    tenant = make_tenant(budget_micro=1_000)
    account = Account.objects.get(pk=tenant.account_id)
    accounts.account_governance_update(account=account, time_zone="Asia/Tokyo")
    group = Group.objects.get(pk=tenant.group_id)
    # 2026-12-31 15:30 UTC is already 2027-01-01 00:30 in Tokyo: January's period.
    fields = accounts.budget_period_set(
        target=group, budget_period="monthly", now=datetime(2026, 12, 31, 15, 30, tzinfo=UTC)
    )
    group.save(update_fields=fields)

    group.refresh_from_db()
    assert (group.period_starts_at, group.period_ends_at) == (
        datetime(2026, 12, 31, 15, tzinfo=UTC),
        datetime(2027, 1, 31, 15, tzinfo=UTC),
    )
    spend(tenant, 10)
    # Rolled on 2027-03-05 (the group sat idle through February): March's period, in Tokyo.
    assert budget_periods_roll(now=datetime(2027, 3, 5, tzinfo=UTC)) == 1
    group.refresh_from_db()
    assert (group.period_starts_at, group.period_ends_at, group.spent_micro) == (
        datetime(2027, 2, 28, 15, tzinfo=UTC),
        datetime(2027, 3, 31, 15, tzinfo=UTC),
        0,
    )
    assert history(group=group) == [
        (
            datetime(2026, 12, 31, 15, tzinfo=UTC),
            datetime(2027, 1, 31, 15, tzinfo=UTC),
            1_000,
            10,
            "monthly",
        )
    ]


@pytest.mark.django_db
def test_the_tenant_api_sets_a_budget_period_and_shows_its_bounds():
    tenant = make_tenant(budget_micro=1_000)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")

    changed = client.patch(
        f"/api/groups/{tenant.group_id}", {"budget_period": "monthly"}, format="json"
    )
    created = client.post(
        "/api/keys",
        {"group": tenant.group_id, "budget_max_micro": 50, "budget_period": "daily"},
        format="json",
    )
    bad = client.patch(f"/api/groups/{tenant.group_id}", {"budget_period": "weekly"}, format="json")

    now = timezone.now()
    month = [t.isoformat().replace("+00:00", "Z") for t in period_bounds("monthly", "UTC", now)]
    day = [t.isoformat().replace("+00:00", "Z") for t in period_bounds("daily", "UTC", now)]
    assert changed.status_code == 200
    body = changed.json()
    assert [body["budget_period"], body["period_starts_at"], body["period_ends_at"]] == [
        "monthly",
        *month,
    ]
    assert created.status_code == 201
    body = created.json()
    assert [body["budget_period"], body["period_starts_at"], body["period_ends_at"]] == [
        "daily",
        *day,
    ]
    assert bad.status_code == 400
    back = client.patch(f"/api/groups/{tenant.group_id}", {"budget_period": "none"}, format="json")
    assert [back.json()[f] for f in ("budget_period", "period_starts_at", "period_ends_at")] == [
        "none",
        None,
        None,
    ]


@pytest.mark.django_db
def test_an_unknown_time_zone_or_threshold_is_refused():
    from django.core.exceptions import ValidationError

    account = Account.objects.get(pk=make_tenant().account_id)
    with pytest.raises(ValidationError):
        accounts.account_governance_update(account=account, time_zone="Mars/Olympus")
    with pytest.raises(ValidationError):
        accounts.account_governance_update(account=account, budget_alert_pcts=[50, 101])
    account.refresh_from_db()
    assert (account.time_zone, account.budget_alert_pcts) == ("UTC", [50, 80, 100])


# ---------------------------------------------------------------- the beat task


@requires_redis
def test_a_real_worker_rolls_an_idle_period(transactional_db, tmp_path):
    tenant = make_tenant(budget_micro=1_000)
    with_period(Group, tenant.group_id)
    spend(tenant, 321)
    starts, ends = end_period(Group, tenant.group_id)
    worker = start_worker(
        tmp_path,
        "roll",
        "-B",
        "--purge",
        "--schedule",
        str(tmp_path / "beat-schedule"),
        TOLLGATE_BUDGET_ROLL_S="1",
    )
    try:

        def rolled():
            if worker.proc.poll() is not None:
                pytest.fail(f"the worker exited:\n{worker.log()[-3000:]}")
            return Group.objects.get(pk=tenant.group_id).spent_micro == 0

        wait_until(rolled, timeout_s=45, interval_s=0.2, what="the worker to roll the period")
    finally:
        worker.stop()
    group = Group.objects.get(pk=tenant.group_id)
    assert history(group=group) == [(starts, ends, 1_000, 321, "daily")]
    assert group.period_ends_at > timezone.now()
