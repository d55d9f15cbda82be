"""Budget holds across the upgrade to billing 0015, when both releases run at once: migrations
run first, while the previous release's processes still run, and those restart after
(docs/production.md, "Upgrades and migrations").

A hold names the key it reserved on in `api_key_id` (NULL for a key without a budget), as the
previous release's holds did, and the request's key in `request_key_id`, which the previous
release neither writes nor reads. So this release charges and releases a hold the previous
release wrote (no `request_key_id`) as that release would have, and the previous release's
release of a hold this release wrote gives back exactly what the hold reserved.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import ApiKey, Group
from billing.ledger.fused import (
    HOLD_AND_RESERVE_STATEMENT,
    HOLD_MANY_STATEMENT,
    HOLD_ONE_STATEMENT,
    SENT_HOLD_ONE_STATEMENT,
)
from billing.ledger.holds import Hold, take_hold
from billing.ledger.settle import Settle, settle
from billing.ledger.sql import GROUPS, HOLDS, KEYS
from billing.models import SettledRequest, SpendHold, Wallet
from billing.reaper import expire_stale_holds
from core.ids import time_ordered_id
from core.sqlexec import run_sync
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from usage.models import UsageLog

pytestmark = [requires_postgres, pytest.mark.django_db]

WALLET = 100_000
BUDGET = 10_000
HOLD = 800
TTL_S = 5

# The previous release's hold row: no request_key_id.
PREVIOUS_HOLD_COLUMNS = (
    "request_id, group_id, api_key_id, caller_spend_id, amount_micro, status, call_sent,"
    " created_at, expires_at"
)


def tenant_with(*, key_budgeted: bool):
    tenant = make_tenant(wallet_micro=WALLET, budget_micro=BUDGET)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(
        budget_max_micro=BUDGET if key_budgeted else None
    )
    return tenant


def previous_release_hold(tenant, *, key_budgeted: bool, call_sent: bool, now) -> str:
    """Take a hold as the previous release did, in its SQL: the group's reserved moved, the
    key's too when it has a budget, and the row naming the key only then."""
    request_id = time_ordered_id()
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {GROUPS} SET reserved_micro = reserved_micro + %s WHERE id = %s",
            (HOLD, tenant.group_id),
        )
        if key_budgeted:
            cursor.execute(
                f"UPDATE {KEYS} SET reserved_micro = reserved_micro + %s WHERE id = %s",
                (HOLD, tenant.api_key_id),
            )
        cursor.execute(
            f"INSERT INTO {HOLDS} ({PREVIOUS_HOLD_COLUMNS})"
            " VALUES (%s, %s, %s, NULL, %s, 'held', %s, %s, %s)",
            (
                request_id,
                tenant.group_id,
                tenant.api_key_id if key_budgeted else None,
                HOLD,
                call_sent,
                now,
                now + timedelta(seconds=TTL_S),
            ),
        )
    return request_id


def counters(tenant) -> tuple[tuple[int, int, int], tuple[int, int]]:
    """(group spent, settled, reserved), (key spent, reserved)."""
    group = Group.objects.get(pk=tenant.group_id)
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    return (
        (group.spent_micro, group.settled_micro, group.reserved_micro),
        (key.spent_micro, key.reserved_micro),
    )


BUDGETED = pytest.mark.parametrize("key_budgeted", [True, False], ids=["budgeted", "unbudgeted"])


@BUDGETED
def test_a_previous_release_hold_the_reaper_charges_reaches_the_key_it_named(key_budgeted):
    tenant = tenant_with(key_budgeted=key_budgeted)
    now = timezone.now()
    request_id = previous_release_hold(tenant, key_budgeted=key_budgeted, call_sent=True, now=now)
    assert counters(tenant) == ((0, 0, HOLD), (0, HOLD if key_budgeted else 0))

    assert expire_stale_holds(now=now + timedelta(seconds=2 * TTL_S)) == (0, 1)

    # As the previous release charged it: its key when the hold named it (a budgeted key),
    # else the group alone; every reserved given back once, none below 0.
    named = tenant.api_key_id if key_budgeted else None
    assert counters(tenant) == ((HOLD, HOLD, 0), (HOLD if key_budgeted else 0, 0))
    assert SpendHold.objects.filter(request_id=request_id).values_list(
        "status", "api_key_id", "request_key_id"
    ).get() == ("charged", named, None)
    marker = SettledRequest.objects.get(request_id=request_id)
    assert (marker.source, marker.api_key_id, marker.provider_cost_micro) == (
        "reaper",
        named,
        HOLD,
    )
    assert UsageLog.objects.filter(request_id=request_id).values_list(
        "api_key_id", "provider_cost_micro"
    ).get() == (named, HOLD)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET, 0)  # no reservation taken

    assert expire_stale_holds(now=now + timedelta(seconds=2 * TTL_S)) == (0, 0)
    assert counters(tenant) == ((HOLD, HOLD, 0), (HOLD if key_budgeted else 0, 0))


@BUDGETED
def test_a_previous_release_hold_is_released_by_its_usage_row_or_at_0(key_budgeted):
    tenant = tenant_with(key_budgeted=key_budgeted)
    now = timezone.now()
    settled = previous_release_hold(tenant, key_budgeted=key_budgeted, call_sent=False, now=now)
    expired = previous_release_hold(tenant, key_budgeted=key_budgeted, call_sent=False, now=now)
    assert counters(tenant) == ((0, 0, 2 * HOLD), (0, 2 * HOLD if key_budgeted else 0))

    # The usage row of one (its key named by the row), and the other's call never sent.
    cost = 300
    run_sync(settle([Settle(settled, tenant.group_id, tenant.api_key_id, cost, 0)], now=now))
    assert counters(tenant) == ((cost, cost, HOLD), (cost, HOLD if key_budgeted else 0))
    assert expire_stale_holds(now=now + timedelta(seconds=2 * TTL_S)) == (0, 1)

    assert counters(tenant) == ((cost, cost, 0), (cost, 0))
    assert dict(
        SpendHold.objects.filter(group_id=tenant.group_id).values_list("request_id", "status")
    ) == {settled: "settled", expired: "expired"}
    assert not SettledRequest.objects.filter(request_id=expired).exists()


def test_every_hold_this_release_writes_names_the_held_key_as_the_previous_release_did():
    """Each form of hold keeps in api_key_id what the previous release kept there (the key
    it reserved on, or NULL): that release's release of it, run here in its SQL, gives
    back what was reserved, and no key's reserved goes below 0."""
    tenant = tenant_with(key_budgeted=True)
    key = tenant.api_key_id
    now = timezone.now()
    expires = now + timedelta(seconds=TTL_S)
    ids = {form: time_ordered_id() for form in ("held", "named", "one", "sent", "reserved")}
    many = [time_ordered_id(), time_ordered_id()]
    run_sync(take_hold(Hold(ids["held"], tenant.group_id, key, True, HOLD), now=now, ttl_s=TTL_S))
    run_sync(take_hold(Hold(ids["named"], tenant.group_id, key, False, HOLD), now=now, ttl_s=TTL_S))
    base = {"group": tenant.group_id, "key": key, "amount": HOLD, "now": now, "expires": expires}
    with connection.cursor() as cursor:
        cursor.execute(HOLD_ONE_STATEMENT, {**base, "request": ids["one"]})
        assert cursor.fetchone() is not None
        cursor.execute(SENT_HOLD_ONE_STATEMENT, {**base, "request": ids["sent"]})
        assert cursor.fetchone() is not None
        cursor.execute(
            HOLD_MANY_STATEMENT,
            {
                "requests": many,
                "amounts": [HOLD, HOLD],
                "keys": [key, key],
                "group": tenant.group_id,
                "now": now,
                "expires": expires,
            },
        )
        assert len(cursor.fetchall()) == 2
        cursor.execute(
            HOLD_AND_RESERVE_STATEMENT,
            {**base, "request": ids["reserved"], "escrow": HOLD, "account": tenant.account_id},
        )
        assert cursor.fetchone()[1]  # held
    assert counters(tenant) == ((0, 0, 7 * HOLD), (0, HOLD))

    # Only the hold that reserved on the key names it where the previous release looks;
    # every one names the request's key for this release's charge.
    named = {request_id: (None, key) for request_id in [*ids.values(), *many]}
    assert {
        request_id: (held_key, request_key)
        for request_id, held_key, request_key in SpendHold.objects.filter(
            group_id=tenant.group_id
        ).values_list("request_id", "api_key_id", "request_key_id")
    } == {**named, ids["held"]: (key, key)}

    # The previous release's release_holds, in its SQL: the group's reserved given back, and
    # the key's for a hold naming a key in api_key_id (key_reserved_not_negative holds).
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {HOLDS} SET status = 'settled' WHERE status = 'held'"
            " AND request_id = ANY(%s) RETURNING amount_micro, group_id, api_key_id",
            ([*ids.values(), *many],),
        )
        for amount, group_id, api_key_id in cursor.fetchall():
            cursor.execute(
                f"UPDATE {GROUPS} SET reserved_micro = reserved_micro - %s WHERE id = %s",
                (amount, group_id),
            )
            if api_key_id is not None:
                cursor.execute(
                    f"UPDATE {KEYS} SET reserved_micro = reserved_micro - %s WHERE id = %s",
                    (amount, api_key_id),
                )
    assert counters(tenant) == ((0, 0, 0), (0, 0))
