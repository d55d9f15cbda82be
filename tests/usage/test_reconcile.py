"""Bandwidth reconciliation: the usage log against what was charged to the counters, drift
corrected once with an adjustment row, a rerun changes nothing, nothing is charged twice."""

from __future__ import annotations

import signal
import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import F

from tests.support.services import requires_redis
from tests.support.stacks import own_stack
from tests.support.tenants import make_tenant
from tests.support.usage import chat, journal_row, set_bandwidth_rate, usage_rows
from tests.support.waits import wait_until

HOUR = timedelta(hours=1)
PROMPT = [{"role": "user", "content": "one two three"}]


def age_rows(by: timedelta = HOUR) -> None:
    from usage.models import UsageLog

    UsageLog.objects.update(stored_at=F("stored_at") - by, created_at=F("created_at") - by)


def spent(tenant) -> tuple[int, int]:
    from accounts.models import ApiKey, Group

    return (
        Group.objects.get(pk=tenant.group_id).spent_micro,
        ApiKey.objects.get(pk=tenant.api_key_id).spent_micro,
    )


def charged_row(tenant, *, bandwidth_micro: int, **fields) -> dict:
    half = bandwidth_micro // 2
    return journal_row(
        group_id=tenant.group_id,
        account_id=tenant.account_id,
        api_key_id=tenant.api_key_id,
        bytes_in=half,
        bytes_out=bandwidth_micro - half,
        bandwidth_charge_micro=bandwidth_micro,
        **fields,
    )


def store_unsettled(*rows: dict) -> None:
    """Store rows the way no writer of this release does: without settling them.

    Drift comes from such rows (an older release's writer during a rolling deploy, an
    import, a bug): the log says a request was charged, the counters never saw it.
    """
    from core.usage_record import UsageRecord
    from usage.models import UsageLog

    for row in rows:
        UsageLog.objects.create(**UsageRecord.from_dict(row).log_columns())


def test_requests_served_through_a_gateway_reconcile_to_zero_drift(stack):
    from billing.models import SettledRequest, SpendAdjustment
    from billing.reconcile import bandwidth_reconcile

    tenant = stack.tenant()
    set_bandwidth_rate(tenant)
    replies = [
        chat(stack.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT})[0] for _ in range(3)
    ]
    ids = [r.headers["x-request-id"] for r in replies]
    rows = usage_rows(ids, expect=3)
    markers = {
        m.request_id: (m.bandwidth_micro, m.provider_cost_micro, m.source)
        for m in SettledRequest.objects.filter(request_id__in=ids)
    }
    assert markers == {
        r.request_id: (r.bandwidth_charge_micro, r.provider_cost_micro, "settle") for r in rows
    }
    charged = sum(r.bandwidth_charge_micro + r.provider_cost_micro for r in rows)
    assert spent(tenant) == (charged, charged)
    age_rows()

    assert bandwidth_reconcile() == []
    assert SpendAdjustment.objects.count() == 0
    assert spent(tenant) == (charged, charged)


def test_a_row_the_counters_never_saw_is_charged_once_and_a_rerun_changes_nothing(
    transactional_db,
):
    from accounts.models import Group
    from billing.models import Receipt, SettledRequest, SpendAdjustment
    from billing.reconcile import bandwidth_reconcile, reconcile_window
    from core.metrics import RECONCILE_DRIFT
    from usage.services import Window, bandwidth_reconcile_window

    tenant, bystander = make_tenant(), make_tenant()
    settled = charged_row(tenant, bandwidth_micro=500)
    SettledRequest.objects.create(
        request_id=settled["request_id"],
        group_id=tenant.group_id,
        api_key_id=tenant.api_key_id,
        bandwidth_micro=500,
        source="settle",
    )
    store_unsettled(
        settled,
        charged_row(tenant, bandwidth_micro=1234),
        charged_row(tenant, bandwidth_micro=766, provider_cost_micro=40),
        journal_row(
            group_id=bystander.group_id,
            account_id=bystander.account_id,
            api_key_id=bystander.api_key_id,
            bytes_in=10,
        ),
    )
    age_rows()

    [drift] = bandwidth_reconcile()

    assert (
        drift.group_id,
        drift.logged_micro,
        drift.charged_micro,
        drift.amount_micro,
        drift.unsettled_cost_micro,
        drift.requests,
    ) == (tenant.group_id, 2500, 500, 2000, 40, 2)
    [adjustment] = SpendAdjustment.objects.all()
    assert (adjustment.group_id, adjustment.amount_micro, adjustment.window_start) == (
        tenant.group_id,
        2040,
        drift.window_start,
    )
    assert spent(tenant) == (2040, 2040)
    assert Group.objects.get(pk=tenant.group_id).settled_micro == 40
    assert spent(bystander) == (0, 0)
    assert RECONCILE_DRIFT._value.get() == 2000
    assert sorted(
        SettledRequest.objects.values_list("bandwidth_micro", "provider_cost_micro", "source")
    ) == [(500, 0, "settle"), (766, 40, "reconcile"), (1234, 0, "reconcile")]
    # What reconciliation charged has its receipts, on the tenant's chain.
    proven = Receipt.objects.filter(account_id=tenant.account_id)
    assert sorted(proven.values_list("kind", "cost_micro", "bandwidth_micro")) == [
        ("correction", 0, 1234),
        ("correction", 40, 766),
    ]

    assert bandwidth_reconcile() == []
    window = Window(
        drift.window_start,
        drift.window_start + timedelta(seconds=settings.TOLLGATE["USAGE_WINDOW_S"]),
    )
    # Recomputing the window finds no drift.
    assert bandwidth_reconcile_window(window, reconcile=reconcile_window) == []
    assert SpendAdjustment.objects.count() == 1
    assert spent(tenant) == (2040, 2040)
    assert RECONCILE_DRIFT._value.get() == 0
    assert proven.count() == 2  # nothing charged again, nothing receipted again


def test_settling_a_row_after_reconciliation_charged_it_charges_nothing(transactional_db):
    from billing.reconcile import bandwidth_reconcile
    from billing.settlement import settle_rows
    from core.usage_record import UsageRecord

    tenant = make_tenant(invoiced=True)
    row = charged_row(tenant, bandwidth_micro=900, provider_cost_micro=40)
    store_unsettled(row)
    age_rows()
    bandwidth_reconcile()
    assert spent(tenant) == (940, 940)

    settle_rows([UsageRecord.from_dict(row)], now=datetime.now(UTC))

    assert spent(tenant) == (940, 940)


def test_a_marker_that_disagrees_with_its_row_is_corrected_by_the_difference(transactional_db):
    from billing.models import Receipt, SettledRequest, SpendAdjustment
    from billing.reconcile import bandwidth_reconcile

    tenant = make_tenant()
    row = charged_row(tenant, bandwidth_micro=700)
    SettledRequest.objects.create(
        request_id=row["request_id"],
        group_id=tenant.group_id,
        api_key_id=tenant.api_key_id,
        bandwidth_micro=750,
        source="settle",
    )
    store_unsettled(row)
    age_rows()

    [drift] = bandwidth_reconcile()

    assert (drift.logged_micro, drift.charged_micro, drift.amount_micro) == (700, 750, -50)
    assert SpendAdjustment.objects.get().amount_micro == -50
    assert spent(tenant) == (-50, -50)
    assert SettledRequest.objects.get().bandwidth_micro == 700
    assert list(Receipt.objects.values_list("kind", "cost_micro", "bandwidth_micro")) == [
        ("correction", 0, -50)
    ]
    assert bandwidth_reconcile() == []


@requires_redis
def test_a_gateway_killed_right_after_answering_is_charged_once_with_its_row(
    transactional_db, gateway_factory, stub
):
    from billing.models import SettledRequest, SpendAdjustment
    from billing.reconcile import bandwidth_reconcile
    from usage.writer import drain_journal_sync

    # The doomed gateway never stores (nor settles) a row itself: it only journals them.
    doomed = own_stack(gateway_factory(TOLLGATE_USAGE_FLUSH_MS="600000"), stub)
    tenant = doomed.tenant(invoiced=True)
    set_bandwidth_rate(tenant)
    request_id = f"doomed-{uuid.uuid4().hex[:8]}"
    response, sent = chat(
        doomed.url,
        tenant,
        {"model": "gpt-4o-mini", "messages": PROMPT},
        headers={"X-Request-Id": request_id},
    )
    doomed.gateway.stop(signal.SIGKILL)
    assert response.status_code == 200

    [row] = wait_until(
        lambda: (
            drain_journal_sync(settings.REDIS_URL, idle_ms=0) is not None
            and usage_rows([request_id])
        ),
        what="the dead gateway's row",
    )

    # 3 x 0.15 + 8 x 0.60 = 5.25 -> 6 micro-USD, plus 1 micro-USD per byte.
    assert (row.provider_cost_micro, row.bandwidth_charge_micro) == (
        6,
        len(sent) + len(response.content),
    )
    charged = 6 + row.bandwidth_charge_micro
    assert spent(tenant) == (charged, charged)
    assert SettledRequest.objects.get(request_id=row.request_id).source == "settle"
    drain_journal_sync(settings.REDIS_URL, idle_ms=0)
    age_rows()
    assert bandwidth_reconcile() == []
    assert SpendAdjustment.objects.count() == 0
    assert spent(tenant) == (charged, charged)
