"""A key-guessing flood costs no database lookups: an unknown key is looked up once and then
answered from memory, and an address may cost at most TOLLGATE_AUTH_FAIL_PER_MIN lookups
that find nothing per minute. Lookups are counted by the gateway's own
tollgate_auth_lookups_total, read from /metrics of a real gateway process.

All test traffic comes from loopback; a second loopback address (127.0.0.2) plays another
client, as a different `scope["client"]`."""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter

import httpx
import pytest

from tests.support.metrics import metric
from tests.support.processes import manage_check
from tests.support.services import requires_redis
from tests.support.stacks import own_stack
from tests.support.waits import wait_until

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def client_from(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=10)


def ask(client: httpx.Client, stack, key: str) -> httpx.Response:
    return client.post(
        f"{stack.url}/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"}
    )


def lookups(stack, outcome: str) -> float:
    return metric(stack.url, "tollgate_auth_lookups_total", outcome=outcome)


def guess() -> str:
    return f"tg-{secrets.token_urlsafe(24)}"


@pytest.fixture
def flood_stack(transactional_db, spawn_gateway, stub, rate_window):
    # The default limit (60 failed lookups per address per minute): nothing set. The minute
    # windows start with the gateway, so a test's whole flood falls in its first one.
    return own_stack(spawn_gateway(**rate_window.env), stub)


def test_a_key_guessing_flood_costs_one_lookup_per_key_and_at_most_the_limit(
    flood_stack, rate_window
):
    stack = flood_stack
    warm, cold = stack.tenant(invoiced=True), stack.tenant(invoiced=True)
    here, elsewhere = client_from("127.0.0.1"), client_from("127.0.0.2")
    assert ask(here, stack, warm.api_key).status_code == 200  # now in the gateway's memory
    assert (lookups(stack, "found"), lookups(stack, "unknown")) == (1, 0)

    # 200 requests with one unknown key: one lookup, then memory.
    same = guess()
    replies = [ask(here, stack, same) for _ in range(200)]
    assert {(r.status_code, r.json()["error"]["code"]) for r in replies} == {(401, "LM-1001")}
    assert lookups(stack, "unknown") == 1

    # 200 requests with fresh unknown keys: the address's budget (60 per minute, one of it
    # spent above) buys 59 more lookups; the rest are refused before any lookup.
    replies = [ask(here, stack, guess()) for _ in range(200)]
    assert Counter(r.status_code for r in replies) == {401: 59, 429: 141}
    assert lookups(stack, "unknown") == 60
    throttled = [r for r in replies if r.status_code == 429]
    assert {r.json()["error"]["code"] for r in throttled} == {"LM-3001"}
    assert all(1 <= int(r.headers["retry-after"]) <= 60 for r in throttled)
    assert metric(stack.url, "tollgate_auth_throttled_total") == 141

    # What memory answers is unaffected: the known-unknown key, the warm valid key.
    assert ask(here, stack, same).status_code == 401
    assert ask(here, stack, warm.api_key).status_code == 200
    # A key not in memory would cost a lookup: refused from this address until the minute
    # ends (the documented choice), served from another address.
    refused = ask(here, stack, cold.api_key)
    assert (refused.status_code, refused.json()["error"]["code"]) == (429, "LM-3001")
    assert ask(elsewhere, stack, cold.api_key).status_code == 200
    assert (lookups(stack, "found"), lookups(stack, "unknown")) == (2, 60)
    assert len(stack.stub.vendor_calls()) == 3  # the three answers; no refusal reached it
    assert rate_window.number() == 0, "the flood left its minute window"


def test_concurrent_requests_with_one_unknown_key_share_one_lookup(flood_stack):
    stack = flood_stack
    key = guess()

    async def flood() -> list[int]:
        async with httpx.AsyncClient(timeout=10) as client:
            replies = await asyncio.gather(
                *(
                    client.post(
                        f"{stack.url}/v1/chat/completions",
                        json=BODY,
                        headers={"Authorization": f"Bearer {key}"},
                    )
                    for _ in range(50)
                )
            )
        return [r.status_code for r in replies]

    assert asyncio.run(flood()) == [401] * 50
    assert lookups(stack, "unknown") == 1


@requires_redis
def test_a_key_restored_after_a_miss_is_looked_up_again_at_once(flood_stack):
    """The miss is remembered for 30 s, but a change to that key reaches every replica's
    memory over the bus (the Django admin's save publishes it): no wait for the TTL."""
    from accounts.models import ApiKey
    from accounts.services import api_key_changed, api_key_revoke

    stack = flood_stack
    tenant = stack.tenant(invoiced=True)
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    api_key_revoke(api_key=api_key)
    here = client_from("127.0.0.1")
    assert ask(here, stack, tenant.api_key).status_code == 401  # the miss is now remembered
    assert ask(here, stack, tenant.api_key).status_code == 401
    assert lookups(stack, "unknown") == 1

    ApiKey.objects.filter(pk=api_key.pk).update(revoked_at=None)  # an operator restores it
    api_key_changed(api_key=api_key)

    wait_until(
        lambda: ask(here, stack, tenant.api_key).status_code == 200,
        timeout_s=5,
        what="the restored key to be served",
    )


def test_the_limit_can_be_turned_off(transactional_db, spawn_gateway, stub):
    stack = own_stack(spawn_gateway(TOLLGATE_AUTH_FAIL_PER_MIN="0"), stub)
    here = client_from("127.0.0.1")

    assert {ask(here, stack, guess()).status_code for _ in range(80)} == {401}
    assert lookups(stack, "unknown") == 80


def test_a_negative_limit_stops_the_process_at_start(tmp_path):
    result = manage_check(tmp_path, TOLLGATE_AUTH_FAIL_PER_MIN="-1")
    assert result.returncode != 0
    assert "Malformed setting TOLLGATE_AUTH_FAIL_PER_MIN" in result.stderr
