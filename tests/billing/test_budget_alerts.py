"""Spend alerts: raised by settlement once per budget, period and threshold, delivered once
through the signed webhook sink (retried while the receiver fails)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

import orjson
import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from accounts.models import Account, ApiKey, Group
from billing.alerts import budget_alerts_deliver
from billing.models import BudgetAlert
from billing.selectors import budget_alerts
from billing.services import budget_periods_roll
from tests.billing.test_budget_periods import spend, with_period
from tests.support.tenants import make_tenant
from tests.usage.test_events import SECRET, webhook  # noqa: F401 (the receiver fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def alerts(**owner) -> list[tuple]:
    return [
        (a.threshold_pct, a.spent_micro, a.budget_max_micro, a.period_starts_at)
        for a in BudgetAlert.objects.filter(**owner).order_by("id")
    ]


def sink_at(url: str):
    return override_settings(
        TOLLGATE={**settings.TOLLGATE, "USAGE_SINK_URL": url, "USAGE_SINK_SECRET": SECRET}
    )


def test_crossing_50_and_80_percent_raises_exactly_one_alert_each():
    tenant = make_tenant(budget_micro=1_000)

    spend(tenant, 499)
    assert alerts(group_id=tenant.group_id) == []
    spend(tenant, 1)  # 500 of 1,000: exactly 50%
    spend(tenant, 299)
    spend(tenant, 1)  # 800: 80%
    spend(tenant, 150)  # 950: nothing new

    assert alerts(group_id=tenant.group_id, api_key__isnull=True) == [
        (50, 500, 1_000, None),
        (80, 800, 1_000, None),
    ]
    spend(tenant, 60)  # 1,010: past 100% (a charge can pass the budget by its excess)
    assert alerts(group_id=tenant.group_id)[-1] == (100, 1_010, 1_000, None)
    assert len(alerts(group_id=tenant.group_id)) == 3


def test_one_charge_past_several_thresholds_raises_each_of_them():
    tenant = make_tenant(budget_micro=100)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=40)
    account = Account.objects.get(pk=tenant.account_id)
    account.budget_alert_pcts = [25, 90]
    account.save(update_fields=["budget_alert_pcts"])

    spend(tenant, 36)  # group 36% of 100; key 90% of 40

    assert alerts(api_key__isnull=True, group_id=tenant.group_id) == [(25, 36, 100, None)]
    assert alerts(api_key_id=tenant.api_key_id) == [(25, 36, 40, None), (90, 36, 40, None)]


def test_a_new_period_raises_its_thresholds_again():
    tenant = make_tenant(budget_micro=1_000)
    with_period(Group, tenant.group_id)
    spend(tenant, 600)
    today = Group.objects.get(pk=tenant.group_id)
    # Tomorrow comes: the roll at its first minute starts tomorrow's period.
    assert budget_periods_roll(now=today.period_ends_at + timedelta(minutes=1)) == 1

    spend(tenant, 500)  # the new period's 50%
    spend(tenant, 10)

    group = Group.objects.get(pk=tenant.group_id)
    assert group.period_starts_at == today.period_ends_at
    assert alerts(group_id=tenant.group_id) == [
        (50, 600, 1_000, today.period_starts_at),
        (50, 500, 1_000, group.period_starts_at),
    ]
    newest = budget_alerts(account=group.account)
    assert [(a.threshold_pct, a.spent_micro) for a in newest] == [(50, 500), (50, 600)]
    assert newest[0].period_ends_at == group.period_ends_at


def test_an_alert_is_delivered_once_signed_to_a_real_receiver(webhook):  # noqa: F811
    receiver = webhook()
    tenant = make_tenant(budget_micro=1_000)
    with_period(Group, tenant.group_id, period="monthly")
    spend(tenant, 500)
    [alert] = BudgetAlert.objects.filter(group_id=tenant.group_id)

    with sink_at(receiver.url):
        report = budget_alerts_deliver()
        again = budget_alerts_deliver(now=timezone.now() + timedelta(hours=1))

    assert (report.delivered, again.delivered, len(receiver.received)) == (1, 0, 1)
    headers, body = receiver.received[0]
    expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["x-tollgate-signature"] == f"sha256={expected}"
    assert headers["x-tollgate-event-id"] == f"balert_{alert.pk}"
    group = Group.objects.get(pk=tenant.group_id)

    def stamp(moment) -> str:
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")

    assert orjson.loads(body) == {
        "type": "budget.alert",
        "id": f"balert_{alert.pk}",
        "account_id": tenant.account_id,
        "group_id": tenant.group_id,
        "api_key_id": None,
        "threshold_pct": 50,
        "spent_micro": 500,
        "budget_max_micro": 1_000,
        "period": {
            "starts_at": stamp(group.period_starts_at),
            "ends_at": stamp(group.period_ends_at),
        },
        "created_at": orjson.loads(body)["created_at"],
    }
    alert.refresh_from_db()
    assert (alert.delivery, alert.delivery_attempts, alert.last_error) == ("delivered", 1, "")
    assert alert.delivered_at is not None


def test_a_failing_receiver_is_retried_with_backoff_until_it_takes_the_alert(webhook):  # noqa: F811
    receiver = webhook(500)
    tenant = make_tenant(budget_micro=1_000)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=10)
    spend(tenant, 8)  # the key's 80% (and 50%)
    now = timezone.now()

    with sink_at(receiver.url):
        first = budget_alerts_deliver(now=now)
        [failed] = BudgetAlert.objects.filter(delivery="pending")
        early = budget_alerts_deliver(now=now + timedelta(seconds=29))
        retried = budget_alerts_deliver(now=now + timedelta(seconds=30))

    assert (first.delivered, first.retrying) == (1, 1)  # one of two alerts hit the 500
    assert (failed.delivery_attempts, failed.last_error) == (1, "usage webhook answered 500")
    assert failed.next_attempt_at == now + timedelta(seconds=30)
    assert (early.delivered, early.retrying, retried.delivered) == (0, 0, 1)
    assert set(BudgetAlert.objects.values_list("delivery", flat=True)) == {"delivered"}
    failed.refresh_from_db()
    assert failed.delivery_attempts == 2
    ids = [headers["x-tollgate-event-id"] for headers, _ in receiver.received]
    # Three posts: the failed one twice, with the same id (a receiver can drop a repeat).
    assert len(ids) == 3 and ids.count(f"balert_{failed.pk}") == 2
    keys = {orjson.loads(body)["api_key_id"] for _, body in receiver.received}
    assert keys == {tenant.api_key_id}


def test_a_receiver_refusing_for_good_fails_the_alert_at_once(webhook):  # noqa: F811
    receiver = webhook(400)
    tenant = make_tenant(budget_micro=100)
    spend(tenant, 50, key=False)

    with sink_at(receiver.url):
        report = budget_alerts_deliver()
        budget_alerts_deliver(now=timezone.now() + timedelta(days=1))

    [alert] = BudgetAlert.objects.filter(group_id=tenant.group_id)
    assert (report.failed, alert.delivery, alert.delivery_attempts) == (1, "failed", 1)
    assert len(receiver.received) == 1


@pytest.mark.parametrize("held", [True, False], ids=["with a hold", "reservation alone"])
def test_a_crash_charge_raises_the_alerts_its_settled_row_would(held):
    """The reaper charges a dead gateway's request at its hold (or its reservation, when it
    took no hold): that charge raises the group's and the key's alerts as settling would."""
    from billing.ledger.holds import Hold, take_hold
    from billing.ledger.wallet import reserve
    from billing.reaper import expire_stale_holds
    from core.sqlexec import run_sync

    tenant = make_tenant(wallet_micro=10_000, budget_micro=1_000 if held else None)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=1_000)
    now = timezone.now()
    request_id = f"crash-{held}"
    if held:
        hold = Hold(request_id, tenant.group_id, tenant.api_key_id, True, 800)
        run_sync(take_hold(hold, now=now, ttl_s=5, call_sent=True))
    else:  # a request without budgets on its group: its reservation says the call was sent
        run_sync(
            reserve(
                account_id=tenant.account_id,
                request_id=request_id,
                group_id=tenant.group_id,
                api_key_id=tenant.api_key_id,
                attempt_no=1,
                amount_micro=800,
                now=now,
                ttl_s=5,
            )
        )

    assert expire_stale_holds(now=now + timedelta(seconds=6)) == ((0, 1) if held else (1, 0))

    assert ApiKey.objects.get(pk=tenant.api_key_id).spent_micro == 800
    assert alerts(api_key_id=tenant.api_key_id) == [(50, 800, 1_000, None), (80, 800, 1_000, None)]
    group_alerts = [(50, 800, 1_000, None), (80, 800, 1_000, None)] if held else []
    assert alerts(group_id=tenant.group_id, api_key__isnull=True) == group_alerts
