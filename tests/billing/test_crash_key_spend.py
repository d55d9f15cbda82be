"""A request charged after a crash reaches the same counters as one that finished: its key's
spend included, whether or not the key has a budget.

A real gateway answers one request (stored as usual) and is killed with SIGKILL in the middle
of a second, streamed one. The reaper (billing.reaper.expire_stale_holds, the beat task's
body) charges the cut one at its hold. Then the key's spend (as the tenant's API shows it),
the group's, the wallet's debits and the usage rows (the API's, the unmeasured one included)
agree to the micro-USD. Four ways in: a key without a budget under a group budget (the hold
is one fused statement with the first reservation), an invoiced account without budgets (the
hold is taken marked right before the call), a prepaid one without budgets (no hold: the
reservation alone), and a key with a budget (the hold reserves on the key too).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiKey, Group
from billing.models import Receipt, SettledRequest, SpendHold, Wallet
from billing.reaper import expire_stale_holds
from tests.billing.test_crash_safety import doomed, worst_case  # noqa: F401  (a fixture)
from tests.support.services import requires_postgres, requires_redis
from tests.support.waits import wait_until
from usage.models import UsageLog

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(120)]
WALLET = 1_000_000
TTL_S = 4  # test_crash_safety's doomed gateway: holds expire after TTL_S
HELLO = [{"role": "user", "content": "hello there"}]  # the stub bills 2 tokens in, 8 out
COST = 6  # 2 x 0.15 + 8 x 0.60 = 5.1 micro-USD, rounded up

# case: (tenant kwargs, key budget, what the reaper resolves: (reservations, holds), whether
# the cut request's hold reserved on its key (None: it took no hold))
CASES = {
    "unbudgeted key, group budget": ({"budget_micro": WALLET}, None, (1, 1), False),
    "unbudgeted key, invoiced": ({"invoiced": True}, None, (0, 1), False),
    "unbudgeted key, no hold": ({}, None, (1, 0), None),
    "budgeted key": ({}, WALLET, (1, 1), True),
}


def api(tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


@pytest.mark.parametrize("case", CASES)
def test_a_crash_charge_reaches_the_key_spend_its_usage_row_states(doomed, case):  # noqa: F811
    kwargs, key_budget, reaped, key_held = CASES[case]
    tenant = doomed.tenant(wallet_micro=WALLET, **kwargs)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=key_budget)
    hold, reserved = worst_case(doomed, tenant)  # for max_tokens=100
    invoiced = kwargs.get("invoiced", False)
    assert hold == reserved or invoiced  # one link: the hold is its reservation
    client = doomed.openai(tenant)

    answered = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=HELLO, max_tokens=100
    )
    assert answered.parse().usage.completion_tokens == 8
    finished = answered.headers["x-tollgate-request-id"]
    wait_until(lambda: UsageLog.objects.filter(request_id=finished).exists(), what="the stored row")

    doomed.kill_mid_stream(client, model="gpt-4o-mini", messages=HELLO, max_tokens=100)

    # The reaper, its clock past the holds' expiry: the cut request was served, never stored.
    assert expire_stale_holds(now=timezone.now() + timedelta(seconds=2 * TTL_S)) == reaped
    [cut] = set(
        SettledRequest.objects.filter(group_id=tenant.group_id, source="reaper").values_list(
            "request_id", flat=True
        )
    )
    assert cut != finished
    if key_held is not None:
        assert SpendHold.objects.filter(request_id=cut).values_list(
            "request_key_id", "api_key_id", "status"
        ).get() == (tenant.api_key_id, tenant.api_key_id if key_held else None, "charged")
    else:
        assert not SpendHold.objects.filter(request_id=cut).exists()
    assert Receipt.objects.get(request_id=cut).api_key_id == tenant.api_key_id

    # The tenant's usage: the finished row and the cut one, unmeasured, both on the key.
    rows = {r["request_id"]: r for r in api(tenant).get("/api/usage").json()["results"]}
    assert {
        rid: (r["api_key_id"], r["measurement"], r["provider_cost_micro"])
        for rid, r in rows.items()
    } == {
        finished: (tenant.api_key_id, "measured", COST),
        cut: (tenant.api_key_id, "unmeasured", hold),
    }
    assert rows[cut]["bandwidth_charge_micro"] == 0
    rows_spend = sum(r["provider_cost_micro"] + r["bandwidth_charge_micro"] for r in rows.values())
    rows_cost = COST + hold

    # The key's spend as the tenant's API shows it, the group's, and the wallet: all as the rows.
    key = api(tenant).get(f"/api/keys/{tenant.api_key_id}").json()
    assert (key["spent_micro"], key["reserved_micro"]) == (rows_spend, 0)
    stored_key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (stored_key.spent_micro, stored_key.reserved_micro) == (rows_spend, 0)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        rows_spend,
        rows_cost,
        0,
    )
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    debited = 0 if invoiced else rows_cost
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET - debited, 0)

    # A second pass charges nothing twice.
    assert expire_stale_holds(now=timezone.now() + timedelta(seconds=2 * TTL_S)) == (0, 0)
    assert ApiKey.objects.get(pk=tenant.api_key_id).spent_micro == rows_spend
