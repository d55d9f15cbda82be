"""Tag budgets in the ledger (billing/tag_ledger.py), program by program, on PostgreSQL and on
embedded SQLite: a hold on each budgeted tag with the request's hold, refused at the budget
naming the tag, released and charged by its usage row, by the reaper (charged at the hold if
the call was sent, else released at 0) and trued up when the row arrives late. The clock is
each program's `now`: a daily budget's next day is a new row.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from accounts.models import Account
from billing.ledger.holds import Hold, take_hold
from billing.ledger.settle import Settle
from billing.ledger.settle import settle as ledger_settle
from billing.ledger.sql import Refused
from billing.models import SpendHold, TagSpend
from billing.reaper import expire_stale_holds
from billing.tag_budgets import tag_budget_create
from billing.tag_ledger import TagHold
from core.ids import time_ordered_id
from core.sqlexec import run_sync
from tests.support.databases import run_on_sqlite
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

pytestmark = [requires_postgres, pytest.mark.django_db]

DAY_1 = datetime(2026, 12, 6, 22, 0, tzinfo=UTC)  # 23:00 in Paris
DAY_2 = datetime(2026, 12, 6, 23, 30, tzinfo=UTC)  # 00:30 on the 7th in Paris
TTL_S = 60


def tag(account_id: int, name: str, budget: int, *, period: str = "all", key: str = "all"):
    return TagHold(name, key, account_id, budget, period, "Europe/Paris")


def hold(tenant, amount: int, *tags: TagHold, now: datetime = DAY_1, sent: bool = False) -> str:
    request_id = time_ordered_id()
    run_sync(
        take_hold(
            Hold(request_id, tenant.group_id, tenant.api_key_id, False, amount, tags=tags),
            now=now,
            ttl_s=TTL_S,
            call_sent=sent,
        )
    )
    return request_id


def spend(account_id: int, name: str, period: str = "all") -> tuple[int, int]:
    row = TagSpend.objects.get(account_id=account_id, tag=name, period=period)
    return row.spent_micro, row.reserved_micro


def settle(tenant, request_id: str, cost: int, bandwidth: int = 0, *, now=DAY_1):
    return run_sync(
        ledger_settle(
            [Settle(request_id, tenant.group_id, tenant.api_key_id, cost, bandwidth)],
            now=now,
        )
    )


def test_holds_fill_a_tag_budget_exactly_and_the_next_is_refused_naming_the_tag():
    tenant = make_tenant()
    a = tag(tenant.account_id, "customer-42", 300)
    other = tag(tenant.account_id, "other", 1_000)
    first = hold(tenant, 100, a, other)
    hold(tenant, 200, a)
    assert spend(tenant.account_id, "customer-42") == (0, 300)
    with pytest.raises(Refused, match="tag budget 'customer-42'"):
        hold(tenant, 0, other, a)  # full: refused even for a zero hold
    # The refusal rolled back the whole hold: the other tag got nothing, no hold row.
    assert spend(tenant.account_id, "other") == (0, 100)
    assert SpendHold.objects.filter(group_id=tenant.group_id).count() == 2

    settle(tenant, first, 40, 2)
    assert spend(tenant.account_id, "customer-42") == (42, 200)  # cost + bandwidth
    assert spend(tenant.account_id, "other") == (42, 0)
    hold(tenant, 58, a)  # exactly what is left: 42 + 200 + 58 = 300
    with pytest.raises(Refused):
        hold(tenant, 1, a)


def test_a_hold_that_would_pass_the_budget_is_refused_and_takes_nothing():
    tenant = make_tenant()
    a = tag(tenant.account_id, "t", 100)
    with pytest.raises(Refused, match="tag budget 't'"):
        hold(tenant, 101, a)
    assert not TagSpend.objects.filter(account_id=tenant.account_id).exists()  # rolled back


def test_two_accounts_with_the_same_tag_never_share_a_row():
    one, two = make_tenant(), make_tenant()
    hold(one, 100, tag(one.account_id, "shared", 100))
    hold(two, 100, tag(two.account_id, "shared", 100))
    assert spend(one.account_id, "shared") == spend(two.account_id, "shared") == (0, 100)


def test_a_daily_budget_starts_a_new_row_in_the_accounts_next_day():
    tenant = make_tenant()
    today = tag(tenant.account_id, "d", 100, period="daily", key="2026-12-06")
    hold(tenant, 100, today, now=DAY_1)
    with pytest.raises(Refused):
        hold(tenant, 1, today, now=DAY_1)
    tomorrow = tag(tenant.account_id, "d", 100, period="daily", key="2026-12-07")
    hold(tenant, 100, tomorrow, now=DAY_2)
    assert spend(tenant.account_id, "d", "2026-12-06") == (0, 100)
    assert spend(tenant.account_id, "d", "2026-12-07") == (0, 100)


def test_the_reaper_charges_a_sent_tag_hold_at_the_hold_and_releases_an_unsent_one_at_0():
    tenant = make_tenant(invoiced=True)
    a = tag(tenant.account_id, "t", 10_000)
    sent = hold(tenant, 700, a, sent=True)
    hold(tenant, 300, a)  # its call never left
    assert expire_stale_holds(now=DAY_1 + timedelta(seconds=2 * TTL_S)) == (0, 2)
    assert spend(tenant.account_id, "t") == (700, 0)

    settle(tenant, sent, 120, 5)  # the late row: trued up to what it measured
    assert spend(tenant.account_id, "t") == (125, 0)


def test_a_tag_budget_made_through_the_service_is_held_by_its_account_only():
    tenant = make_tenant()
    budget = tag_budget_create(
        account=Account.objects.get(pk=tenant.account_id),
        tag="Customer-42",
        budget_max_micro=500,
        budget_period="daily",
    )
    assert (budget.tag, budget.budget_max_micro, budget.budget_period) == (
        "customer-42",
        500,
        "daily",
    )


SQLITE_SCRIPT = """
import json
from datetime import UTC, datetime, timedelta

import django

django.setup()
from django.core.management import call_command

call_command("migrate", verbosity=0)

from billing.ledger.sql import Refused
from billing.models import TagSpend
from billing.reaper import expire_stale_holds
from core.sqlexec import run_sync
from tests.billing.test_tag_ledger import DAY_1, TTL_S, hold, settle, tag
from tests.support.tenants import make_tenant

tenant = make_tenant(invoiced=True)
a = tag(tenant.account_id, "t", 1_000)
settled = hold(tenant, 400, a)
reaped = hold(tenant, 500, a, sent=True)
try:
    hold(tenant, 101, a)
    refused = ""
except Refused as exc:
    refused = str(exc)
settle(tenant, settled, 30, 1)
expire_stale_holds(now=DAY_1 + timedelta(seconds=2 * TTL_S))
row = TagSpend.objects.get(account_id=tenant.account_id, tag="t")
print(json.dumps({"refused": refused, "spend": [row.spent_micro, row.reserved_micro]}))
"""


def test_tag_holds_work_on_embedded_sqlite(tmp_path):
    report = run_on_sqlite(SQLITE_SCRIPT, tmp_path)
    assert report == {"refused": "tag budget 't'", "spend": [31 + 500, 0]}


def test_retention_deletes_the_tag_holds_of_closed_holds_only():
    from billing.models import SpendHoldTag
    from billing.partitions import apply_retention

    tenant = make_tenant()
    a = tag(tenant.account_id, "t", 1_000)
    closed = hold(tenant, 100, a, now=timezone.now())
    still_open = hold(tenant, 100, a, now=timezone.now())
    settle(tenant, closed, 10)

    apply_retention(now=timezone.now() + timedelta(days=30), days=10)

    assert list(SpendHoldTag.objects.values_list("request_id", flat=True)) == [still_open]
