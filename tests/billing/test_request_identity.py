"""Request identity: the gateway mints the id that keys a request's books.

A client's X-Request-Id is a label scoped to its account (stored, echoed, filterable); reusing
it, sequentially or concurrently, within one tenant or across two, never makes two requests
share a usage row, a hold, a reservation, a settlement marker or an in-flight slot.
"""

from __future__ import annotations

import asyncio

import httpx

from accounts.models import Group
from billing.models import Reservation, SettledRequest, Wallet
from tests.support.usage import settled, usage_rows

HELLO = [{"role": "user", "content": "hello there"}]  # 2 prompt tokens; answers are 8
COST = 6  # 2 x 0.15 + 8 x 0.60 = 5.1 micro-USD, rounded up
SLOW = {"kind": "slow", "delay_ms": 100, "times": 50}  # 8 tokens x 100 ms: 0.8 s per answer


async def _send(url: str, key: str, request_id: str, bodies: list[dict]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{url}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}", "X-Request-Id": request_id},
                    json=body,
                )
                for body in bodies
            )
        )


def send(url: str, key: str, request_id: str, *bodies: dict) -> list[httpx.Response]:
    """Send the bodies at once, all carrying one client request id."""
    return asyncio.run(_send(url, key, request_id, list(bodies)))


def ask(**extra) -> dict:
    return {"model": "gpt-4o-mini", "messages": HELLO, **extra}


def assert_charged_once_each(tenant, rows, *, served: int) -> None:
    ok = [r for r in rows if r.status == 200]
    assert len(ok) == served
    assert len({r.request_id for r in rows}) == len(rows)  # every row its own minted id
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        served * COST,
        served * COST,
        0,
    )
    markers = SettledRequest.objects.filter(group_id=tenant.group_id)
    assert sorted(markers.values_list("request_id", flat=True)) == sorted(r.request_id for r in ok)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.reserved_micro, wallet.balance_micro) == (0, 1_000_000 - served * COST)
    reservations = Reservation.objects.filter(wallet=wallet)
    assert sorted(reservations.values_list("status", flat=True)) == ["committed"] * served
    assert sorted(reservations.values_list("request_id", flat=True)) == sorted(
        r.request_id for r in ok
    )


def test_reusing_one_request_id_sequentially_charges_every_request(stack):
    tenant = stack.tenant(wallet_micro=1_000_000, budget_micro=1_000_000)

    responses = [send(stack.url, tenant.api_key, "same-id", ask())[0] for _ in range(6)]

    assert [r.status_code for r in responses] == [200] * 6
    assert {r.headers["x-request-id"] for r in responses} == {"same-id"}
    minted = [r.headers["x-tollgate-request-id"] for r in responses]
    assert len(set(minted)) == 6
    assert len(stack.stub.vendor_calls()) == 6
    rows = settled(tenant, 6)
    assert {r.client_request_id for r in rows} == {"same-id"}
    assert sorted(r.request_id for r in rows) == sorted(minted)
    assert_charged_once_each(tenant, rows, served=6)


def test_reusing_one_request_id_concurrently_charges_every_request(stack):
    tenant = stack.tenant(wallet_micro=1_000_000, budget_micro=1_000_000)
    stack.stub.faults(SLOW)

    responses = send(stack.url, tenant.api_key, "burst-id", *[ask()] * 12)

    assert [r.status_code for r in responses] == [200] * 12
    assert len(stack.stub.vendor_calls()) == 12
    rows = settled(tenant, 12)
    assert_charged_once_each(tenant, rows, served=12)


def test_one_request_id_cannot_share_a_concurrency_slot(stack):
    tenant = stack.tenant(wallet_micro=1_000_000, budget_micro=1_000_000)
    Group.objects.filter(pk=tenant.group_id).update(concurrency_limit=2)
    stack.gateway.reload()
    stack.stub.faults(SLOW)

    responses = send(stack.url, tenant.api_key, "slot-id", *[ask()] * 10)

    codes = sorted(
        (r.status_code, r.json()["error"]["code"] if r.status_code != 200 else None)
        for r in responses
    )
    assert codes == [(200, None)] * 2 + [(429, "LM-3003")] * 8
    assert len(stack.stub.vendor_calls()) == 2
    rows = settled(tenant, 10)
    assert_charged_once_each(tenant, rows, served=2)


def test_a_refused_request_reusing_an_id_cannot_unbill_the_served_one(stack):
    tenant = stack.tenant(wallet_micro=1_000_000, budget_micro=1_000_000)
    stack.stub.faults(SLOW)

    async def both() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=10, max_keepalive_connections=0)
        headers = {"Authorization": f"Bearer {tenant.api_key}", "X-Request-Id": "Q"}
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            served = asyncio.ensure_future(
                client.post(f"{stack.url}/v1/chat/completions", headers=headers, json=ask())
            )
            await asyncio.sleep(0.2)  # the slow answer is being streamed from the stub by now
            refused = await client.post(
                f"{stack.url}/v1/chat/completions",
                headers=headers,
                json={"model": "no-such-model", "messages": HELLO},
            )
            return [await served, refused]

    served, refused = asyncio.run(both())

    assert (served.status_code, refused.status_code) == (200, 400)
    assert refused.json()["error"]["code"] == "LM-2001"
    rows = settled(tenant, 2)
    assert sorted((r.status, r.client_request_id) for r in rows) == [(200, "Q"), (400, "Q")]
    assert_charged_once_each(tenant, rows, served=1)


def test_two_tenants_with_one_request_id_keep_their_own_books(stack):
    alice = stack.tenant(wallet_micro=1_000_000, budget_micro=1_000_000)
    bob = stack.tenant(wallet_micro=1_000_000, budget_micro=1_000_000)
    stack.stub.faults(SLOW)

    async def both() -> tuple[list[httpx.Response], list[httpx.Response]]:
        return await asyncio.gather(
            _send(stack.url, alice.api_key, "shared", [ask()] * 3),
            _send(stack.url, bob.api_key, "shared", [ask()] * 2 + [{"model": "nope"}]),
        )

    alice_responses, bob_responses = asyncio.run(both())

    assert [r.status_code for r in alice_responses] == [200] * 3
    assert sorted(r.status_code for r in bob_responses) == [200, 200, 400]
    assert_charged_once_each(alice, settled(alice, 3), served=3)
    assert_charged_once_each(bob, settled(bob, 3), served=2)
    # Each tenant finds only its own rows by the shared label, and none by the other's ids.
    for tenant, own in ((alice, 3), (bob, 3)):
        api = httpx.Client(
            base_url=stack.url, headers={"Authorization": f"Token {tenant.api_token}"}
        )
        listed = api.get("/api/usage", params={"client_request_id": "shared"}).json()
        assert listed["count"] == own
        assert {row["group_id"] for row in listed["results"]} == {tenant.group_id}
        detail = api.get("/api/usage/requests/shared")
        assert detail.status_code == 200
        assert detail.json()["group_id"] == tenant.group_id
    alice_row = usage_rows(group_id=alice.group_id)[0]
    bob_api = httpx.Client(base_url=stack.url, headers={"Authorization": f"Token {bob.api_token}"})
    assert bob_api.get(f"/api/usage/requests/{alice_row.request_id}").status_code == 404
