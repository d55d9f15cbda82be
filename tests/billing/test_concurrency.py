"""Exact under concurrency: 200 real concurrent requests over two gateway processes."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from accounts.models import ApiKey, Group
from billing.models import LedgerEntry, Reservation, SpendHold, Wallet
from tests.billing.test_money_e2e import HELLO, worst_case
from tests.support.processes import INTERNAL_TOKEN
from tests.support.services import requires_postgres, requires_redis
from tests.support.stacks import Stack
from tests.support.waits import wait_until

REQUESTS = 200
ALLOWED = 10
COST = 6

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(180)]


@pytest.fixture
def two_gateways(stack, spawn_gateway) -> list[str]:
    other = spawn_gateway()
    other.reload()
    return [stack.url, other.url]


async def storm(urls: list[str], api_key: str) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(index: int) -> httpx.Response:
            return await client.post(
                f"{urls[index % 2]}/v1/chat/completions",
                headers={"Authorization": f"Bearer {api_key}"},
                json={"model": "gpt-4o-mini", "messages": HELLO, "max_tokens": 100},
            )

        return await asyncio.gather(*(one(i) for i in range(REQUESTS)))


def hold_everyone(stack: Stack) -> None:
    """Make the stub slow enough that all requests are in flight before any commits."""
    stack.stub.faults({"kind": "slow", "delay_ms": 400, "times": REQUESTS})


def outcome(responses) -> dict[int, int]:
    counts: dict[int, int] = {}
    for response in responses:
        counts[response.status_code] = counts.get(response.status_code, 0) + 1
    return counts


def test_a_wallet_covering_ten_holds_admits_exactly_ten_of_two_hundred(stack, two_gateways):
    probe = stack.tenant()
    hold = worst_case(stack, probe, max_tokens=100)
    tenant = stack.tenant(wallet_micro=ALLOWED * hold)
    hold_everyone(stack)

    responses = asyncio.run(storm(two_gateways, tenant.api_key))

    assert outcome(responses) == {200: ALLOWED, 402: REQUESTS - ALLOWED}
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 402} == {"LM-4002"}
    assert len(stack.stub.vendor_calls()) == ALLOWED
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    wait_until(
        lambda: not Reservation.objects.filter(wallet=wallet, status="pending").exists(),
        what="every reservation to resolve",
    )
    wallet.refresh_from_db()
    committed = sum(
        Reservation.objects.filter(wallet=wallet).values_list("committed_micro", flat=True)
    )
    assert committed == ALLOWED * COST
    assert wallet.balance_micro + committed == ALLOWED * hold
    assert wallet.balance_micro >= 0 and wallet.reserved_micro == 0
    assert LedgerEntry.objects.filter(wallet=wallet, kind="commit").count() == ALLOWED


def test_a_group_budget_covering_ten_holds_admits_exactly_ten(stack, two_gateways):
    probe = stack.tenant()
    hold = worst_case(stack, probe, max_tokens=100)
    tenant = stack.tenant(invoiced=True, budget_micro=ALLOWED * hold)
    for url in two_gateways:
        httpx.post(f"{url}/internal/reload", headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"})
    hold_everyone(stack)

    responses = asyncio.run(storm(two_gateways, tenant.api_key))

    assert outcome(responses) == {200: ALLOWED, 402: REQUESTS - ALLOWED}
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 402} == {"LM-4001"}
    assert len(stack.stub.vendor_calls()) == ALLOWED
    wait_until(
        lambda: not SpendHold.objects.filter(group_id=tenant.group_id, status="held").exists(),
        what="settle",
    )
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        ALLOWED * COST,
        ALLOWED * COST,
        0,
    )


def test_a_key_budget_inside_a_group_admits_exactly_ten(stack, two_gateways):
    probe = stack.tenant()
    hold = worst_case(stack, probe, max_tokens=100)
    tenant = stack.tenant(invoiced=True, budget_micro=1_000 * hold)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=ALLOWED * hold)
    for url in two_gateways:
        httpx.post(f"{url}/internal/reload", headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"})
    hold_everyone(stack)

    responses = asyncio.run(storm(two_gateways, tenant.api_key))

    assert outcome(responses) == {200: ALLOWED, 402: REQUESTS - ALLOWED}
    assert len(stack.stub.vendor_calls()) == ALLOWED
    wait_until(
        lambda: not SpendHold.objects.filter(group_id=tenant.group_id, status="held").exists(),
        what="settle",
    )
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    group = Group.objects.get(pk=tenant.group_id)
    assert (key.spent_micro, key.reserved_micro) == (ALLOWED * COST, 0)
    assert (group.spent_micro, group.reserved_micro) == (ALLOWED * COST, 0)
