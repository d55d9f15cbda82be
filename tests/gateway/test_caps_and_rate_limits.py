"""Caps and rate limits, refused before any upstream call: LM-3001, LM-3002, LM-3003.

Concurrency tests hold slots with slow stub answers (8 tokens x 150 ms = 1.2 s) while many
requests arrive at once (asyncio + httpx). Rate tests run on gateways of their own, started
in a fresh one-minute rate window (tests.support.rates.RateWindow), so all their requests fall
in one window.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from django.conf import settings

from tests.support.processes import manage_check
from tests.support.profiles import stub_profiles
from tests.support.services import HAS_REDIS, requires_redis
from tests.support.stacks import own_stack

PROMPT = [{"role": "user", "content": "one two three"}]  # 3 prompt tokens; answers are 8
SLOW = {"kind": "slow", "delay_ms": 150, "times": 50}


def ask(url: str, key: str, **body) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        timeout=20,
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "gpt-4o-mini", "messages": PROMPT, **body},
    )


def messages(url: str, key: str, **body) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/messages",
        timeout=20,
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        json={"model": "claude-3-5-haiku", "max_tokens": 100, "messages": PROMPT, **body},
    )


def code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code == 200:
        return 200, None
    return response.status_code, response.json()["error"]["code"]


async def concurrently(requests: list[tuple[str, str]]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{url}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}"},
                    json={"model": "gpt-4o-mini", "messages": PROMPT},
                )
                for url, key in requests
            )
        )


def second_key(tenant, **limits) -> str:
    from accounts.models import Group
    from accounts.services import api_key_create

    _, secret = api_key_create(group=Group.objects.get(pk=tenant.group_id), name="second", **limits)
    return secret


def limit_key(tenant, **fields) -> None:
    from accounts.models import ApiKey

    ApiKey.objects.filter(pk=tenant.api_key_id).update(**fields)


def limit_group(tenant, **fields) -> None:
    from accounts.models import Group

    Group.objects.filter(pk=tenant.group_id).update(**fields)


def redis_client():
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)


# ---------------------------------------------------------------- caps


@pytest.fixture(scope="module")
def capped_fleet(module_gateways):
    if not HAS_REDIS:
        pytest.skip("needs Redis: set REDIS_URL")
    return [module_gateways(TOLLGATE_INFLIGHT_MAX="3") for _ in range(2)]


@pytest.fixture
def fleet_stack(transactional_db, capped_fleet, stub):
    stack = own_stack(capped_fleet[0], stub, stub_profiles(stub.url))
    capped_fleet[1].reload()
    return stack


@requires_redis
def test_fleet_inflight_cap_holds_across_two_replicas_under_concurrent_load(
    fleet_stack, capped_fleet
):
    a, b = capped_fleet
    tenant = fleet_stack.tenant()
    fleet_stack.stub.faults(SLOW)

    responses = asyncio.run(concurrently([(gw.url, tenant.api_key) for gw in (a, b)] * 12))

    assert sorted(code(r) for r in responses) == [(200, None)] * 3 + [(429, "LM-3003")] * 21
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["error"]["message"] == "The fleet in-flight cap is reached."
    assert refused.headers["retry-after"] == "1"
    assert len(fleet_stack.stub.vendor_calls()) == 3  # refusals never reached the vendor
    client = redis_client()
    assert client.zcard("tollgate:rl:inflight") == 0  # every slot was handed back
    client.close()
    fleet_stack.stub.clear()
    assert [code(ask(gw.url, tenant.api_key)) for gw in (a, b)] == [(200, None)] * 2


@pytest.fixture
def fresh_fleet(transactional_db, spawn_gateway, stub, rate_window):
    """Two replicas like `capped_fleet`, started in a fresh rate window they share."""
    if not HAS_REDIS:
        pytest.skip("needs Redis: set REDIS_URL")
    fleet = [spawn_gateway(TOLLGATE_INFLIGHT_MAX="3", **rate_window.env) for _ in range(2)]
    stack = own_stack(fleet[0], stub, stub_profiles(stub.url))
    fleet[1].reload()
    return stack, fleet


@requires_redis
def test_key_rpm_is_counted_once_across_two_replicas(fresh_fleet):
    fleet_stack, (a, b) = fresh_fleet
    tenant = fleet_stack.tenant()
    limit_key(tenant, rpm_limit=3)

    served = [ask(gw.url, tenant.api_key) for gw in (a, b, a)]
    refused = ask(b.url, tenant.api_key)

    assert [code(r) for r in served] == [(200, None)] * 3
    assert [
        (r.headers["x-ratelimit-limit-requests"], r.headers["x-ratelimit-remaining-requests"])
        for r in served
    ] == [("3", "2"), ("3", "1"), ("3", "0")]
    assert code(refused) == (429, "LM-3001")
    assert refused.json()["error"]["message"] == "Request rate over limit for key."
    # Retry-After is the rest of the window, as the last success's reset header said.
    reset_s = int(served[-1].headers["x-ratelimit-reset-requests"].removesuffix("s"))
    assert int(refused.headers["retry-after"]) in (reset_s, reset_s - 1)
    assert len(fleet_stack.stub.vendor_calls()) == 3


def test_group_concurrency_cap_refuses_without_calling_upstream(stack):
    tenant, other = stack.tenant(), stack.tenant()
    limit_group(tenant, concurrency_limit=2)
    stack.stub.faults(SLOW)

    *responses, others = asyncio.run(
        concurrently([(stack.url, tenant.api_key)] * 6 + [(stack.url, other.api_key)])
    )

    assert sorted(code(r) for r in responses) == [(200, None)] * 2 + [(429, "LM-3003")] * 4
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["error"]["message"] == "The group concurrency cap is reached."
    assert code(others) == (200, None)  # another group is not held back by this one's cap
    assert len(stack.stub.vendor_calls()) == 3


@pytest.fixture(scope="module")
def redisless_gateway(module_gateways):
    return module_gateways(REDIS_URL="", TOLLGATE_INFLIGHT_MAX="4", TOLLGATE_REPLICAS="2")


def test_without_redis_each_process_keeps_its_share_of_the_inflight_cap(
    transactional_db, redisless_gateway, stub
):
    stack = own_stack(redisless_gateway, stub, stub_profiles(stub.url))
    tenant = stack.tenant()
    stub.faults(SLOW)

    responses = asyncio.run(concurrently([(stack.url, tenant.api_key)] * 6))

    # 4 fleet-wide over 2 replicas: this process admits 2 at a time.
    assert sorted(code(r) for r in responses) == [(200, None)] * 2 + [(429, "LM-3003")] * 4
    assert len(stub.vendor_calls()) == 2


# ---------------------------------------------------------------- rates


def test_group_rpm_counts_every_key_of_the_group(fresh_window_stack):
    stack = fresh_window_stack
    tenant = stack.tenant()
    other_key = second_key(tenant)
    limit_group(tenant, rpm_limit=2)

    first, second = ask(stack.url, tenant.api_key), ask(stack.url, other_key)
    refused = ask(stack.url, tenant.api_key)

    assert [code(first), code(second)] == [(200, None)] * 2
    # The keys have no limit of their own: the headers speak for the group's.
    assert [r.headers["x-ratelimit-remaining-requests"] for r in (first, second)] == ["1", "0"]
    assert code(refused) == (429, "LM-3001")
    assert refused.json()["error"]["message"] == "Request rate over limit for group."
    assert "retry-after" in refused.headers
    assert len(stack.stub.vendor_calls()) == 2


def test_key_tpm_counts_real_usage_in_openai_and_anthropic_shapes(fresh_window_stack):
    stack = fresh_window_stack
    tenant = stack.tenant()
    limit_key(tenant, tpm_limit=40)

    # Each answer uses 3 prompt + 8 completion = 11 tokens, as the vendor reports them.
    plain = ask(stack.url, tenant.api_key)
    assert code(plain) == (200, None)
    assert (
        plain.headers["x-tokens-consumed"],
        plain.headers["x-tokens-remaining"],
        plain.headers["x-ratelimit-limit-tokens"],
    ) == ("11", "29", "40")

    streamed = messages(stack.url, tenant.api_key, stream=True)  # Anthropic stream usage
    assert streamed.status_code == 200
    assert streamed.headers["anthropic-ratelimit-tokens-remaining"] == "29"  # known before it ran
    assert "x-tokens-consumed" not in streamed.headers

    anthropic_json = messages(stack.url, tenant.api_key)
    assert code(anthropic_json) == (200, None)
    assert anthropic_json.json()["usage"] == {
        "input_tokens": 3,
        "output_tokens": 8,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert (
        anthropic_json.headers["x-tokens-consumed"],
        anthropic_json.headers["x-tokens-remaining"],
    ) == ("11", "7")

    openai_stream = ask(stack.url, tenant.api_key, stream=True)  # 33 < 40: admitted
    assert openai_stream.status_code == 200
    refused = ask(stack.url, tenant.api_key)  # 44 >= 40

    assert code(refused) == (429, "LM-3002")
    assert refused.json()["error"]["message"] == "Token rate over limit for key."
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert len(stack.stub.vendor_calls()) == 4


def test_group_tpm_is_shared_by_the_groups_keys(fresh_window_stack):
    stack = fresh_window_stack
    tenant = stack.tenant()
    other_key = second_key(tenant)
    limit_group(tenant, tpm_limit=20)

    first = ask(stack.url, tenant.api_key)
    second = messages(stack.url, other_key)
    refused = ask(stack.url, other_key)

    assert [code(first), code(second)] == [(200, None)] * 2
    assert [
        (r.headers["x-tokens-consumed"], r.headers["x-tokens-remaining"]) for r in (first, second)
    ] == [("11", "9"), ("11", "0")]
    assert code(refused) == (429, "LM-3002")
    assert refused.json()["error"]["message"] == "Token rate over limit for group."
    assert len(stack.stub.vendor_calls()) == 2


def test_a_negative_rate_epoch_stops_the_process_at_start(tmp_path):
    result = manage_check(tmp_path, TOLLGATE_RATE_EPOCH_S="-60")
    assert result.returncode != 0
    assert "Malformed setting TOLLGATE_RATE_EPOCH_S" in result.stderr
