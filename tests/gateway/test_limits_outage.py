"""Limits that hold through a Redis outage, and token limits a burst cannot overshoot.

Rate tests: two gateway replicas (TOLLGATE_REPLICAS=2) share a redis-server of the test's own
(tests.conftest.own_redis), which the test kills (SIGKILL, restarted empty) or pauses
(SIGSTOP) mid-window while requests keep coming, alternating between the replicas. The
replicas start in a fresh rate window they share (tests.support.rates.RateWindow). In one
fixed one-minute window the fleet admits at most the limit plus one request per replica: on
fallback each process keeps its share of what it last saw was left, and a Redis that answers
again is brought up to what the processes counted meanwhile.

Token tests: the stub answers "one two three" with 3 prompt + 8 completion = 11 tokens; with
`max_tokens` 8 a request's estimate is its prompt bound (13 bytes + 8 per message + 8 = 29)
plus 8 = 37 tokens, reserved at admission and trued up to 11 when it finishes.
"""

from __future__ import annotations

import asyncio

import httpx
import redis
from django.conf import settings

from tests.support.metrics import metric
from tests.support.profiles import stub_profiles
from tests.support.services import requires_redis
from tests.support.stacks import own_stack

PROMPT = [{"role": "user", "content": "one two three"}]
RPM = 120
ESTIMATE = 37  # prompt bound 29 + max_tokens 8
USED = 11  # 3 prompt + 8 completion, as the stub reports them
SLOW = {"kind": "slow", "delay_ms": 150, "times": 50}  # 8 tokens x 150 ms: held 1.2 s


def code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code == 200:
        return 200, None
    return response.status_code, response.json()["error"]["code"]


def limit_key(tenant, **fields) -> None:
    from accounts.models import ApiKey

    ApiKey.objects.filter(pk=tenant.api_key_id).update(**fields)


def send(client: httpx.Client, urls: list[str], key: str, n: int) -> list[tuple[int, str | None]]:
    """Send n requests in turn to each replica; return their (status, error code)."""
    return [
        code(
            client.post(
                f"{urls[i % len(urls)]}/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={"model": "gpt-4o-mini", "messages": PROMPT},
            )
        )
        for i in range(n)
    ]


def two_replicas(spawn_gateway, stub, redis_url: str, rate_window, **env: str):
    gateways = [
        spawn_gateway(REDIS_URL=redis_url, TOLLGATE_REPLICAS="2", **rate_window.env, **env)
        for _ in range(2)
    ]
    stack = own_stack(gateways[0], stub, stub_profiles(stub.url))
    gateways[1].reload()
    return stack, gateways


def rpm_key(tenant, rate_window) -> str:
    return f"tollgate:rl:rpm:key:{tenant.api_key_id}:{rate_window.number()}"


def degraded(gateway) -> bool:
    return metric(gateway.url, "tollgate_redis_degraded") == 1


def outage_window(
    stack, gateways, rate_window, *, interrupt, recover, then=None
) -> list[tuple[int, str | None]]:
    """Send requests before, during and after a Redis outage, all in one rate window; then
    call `then(client, tenant)` (still in that window) and add what it returns."""
    tenant = stack.tenant()
    limit_key(tenant, rpm_limit=RPM)
    urls = [gw.url for gw in gateways]
    window = rate_window.number()
    with httpx.Client(timeout=20) as client:
        before = send(client, urls, tenant.api_key, RPM // 2)
        interrupt()
        during = send(client, urls, tenant.api_key, RPM + 10)
        assert all(degraded(gw) for gw in gateways)
        recover()
        after = send(client, urls, tenant.api_key, 20)
        while any(degraded(gw) for gw in gateways):  # until both share Redis again
            assert rate_window.seconds_left() > 3, "the gateways did not use Redis again"
            after += send(client, urls, tenant.api_key, 10)
        after += send(client, urls, tenant.api_key, 40)
        if then is not None:
            after += then(client, tenant)
    assert rate_window.number() == window, "the test left its rate window"
    assert before == [(200, None)] * (RPM // 2)
    assert set(during + after) <= {(200, None), (429, "LM-3001")}
    return before + during + after


@requires_redis
def test_fleet_rpm_holds_when_redis_is_killed_and_restarted_empty_mid_window(
    transactional_db, own_redis, spawn_gateway, stub, rate_window
):
    stack, gateways = two_replicas(spawn_gateway, stub, own_redis.url, rate_window)
    counted = []

    def ask_a_new_replica(client, tenant):
        # A replica that never saw the outage is judged by Redis alone: it came back empty,
        # and the others brought it up to what they had counted.
        counted.append(int(redis.Redis(port=own_redis.port).get(rpm_key(tenant, rate_window))))
        newcomer = spawn_gateway(REDIS_URL=own_redis.url, TOLLGATE_REPLICAS="2", **rate_window.env)
        return send(client, [newcomer.url], tenant.api_key, 5)

    answers = outage_window(
        stack,
        gateways,
        rate_window,
        interrupt=own_redis.stop,
        recover=own_redis.start,
        then=ask_a_new_replica,
    )

    admitted = answers.count((200, None))
    assert RPM - 2 <= admitted <= RPM + 2, answers  # at most one over per replica
    assert counted[0] >= RPM - 2
    assert answers[-5:].count((200, None)) <= 1
    assert len(stub.vendor_calls()) == admitted  # refusals never reached the vendor


@requires_redis
def test_fleet_rpm_holds_when_redis_hangs_mid_window(
    transactional_db, own_redis, spawn_gateway, stub, rate_window
):
    stack, gateways = two_replicas(
        spawn_gateway, stub, own_redis.url, rate_window, TOLLGATE_REDIS_TIMEOUT_MS="200"
    )

    counted = []

    def read_counter(client, tenant):
        counted.append(int(redis.Redis(port=own_redis.port).get(rpm_key(tenant, rate_window))))
        return []

    answers = outage_window(
        stack,
        gateways,
        rate_window,
        interrupt=own_redis.pause,
        recover=own_redis.resume,
        then=read_counter,
    )

    admitted = answers.count((200, None))
    # Scripts that timed out still ran once Redis woke up: counted, never admitted.
    assert RPM - 8 <= admitted <= RPM + 2, answers
    assert counted[0] >= admitted  # what the replicas admitted alone reached Redis
    assert len(stub.vendor_calls()) == admitted


async def burst(url: str, key: str, n: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{url}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}"},
                    json={"model": "gpt-4o-mini", "messages": PROMPT, "max_tokens": 8},
                )
                for _ in range(n)
            )
        )


def consumed(responses: list[httpx.Response]) -> int:
    return sum(int(r.headers["x-tokens-consumed"]) for r in responses if r.status_code == 200)


@requires_redis
def test_a_concurrent_burst_cannot_overshoot_the_key_tpm(fresh_window_stack, rate_window):
    stack = fresh_window_stack
    tenant = stack.tenant()
    limit_key(tenant, tpm_limit=100)
    stack.stub.faults(SLOW)
    window = rate_window.number()

    responses = asyncio.run(burst(stack.url, tenant.api_key, 30))

    # Each admission reserves 37: 0, 37 and 74 are under 100, then 111 refuses the rest.
    assert sorted(code(r) for r in responses) == [(200, None)] * 3 + [(429, "LM-3002")] * 27
    assert consumed(responses) == 3 * USED <= 100 + ESTIMATE
    assert len(stack.stub.vendor_calls()) == 3
    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    # Every reservation was trued up to the tokens really used.
    assert client.get(f"tollgate:rl:tpm:key:{tenant.api_key_id}:{window}") == str(3 * USED)
    client.close()


def test_without_redis_a_concurrent_burst_cannot_overshoot_the_process_share_of_tpm(
    transactional_db, spawn_gateway, stub, rate_window
):
    gateway = spawn_gateway(REDIS_URL="", TOLLGATE_REPLICAS="2", **rate_window.env)
    stack = own_stack(gateway, stub, stub_profiles(stub.url))
    tenant = stack.tenant()
    limit_key(tenant, tpm_limit=100)
    stub.faults(SLOW)

    responses = asyncio.run(burst(stack.url, tenant.api_key, 30))

    # This process's share is 100 / 2 = 50: 0 and 37 are under it, 74 is not.
    assert sorted(code(r) for r in responses) == [(200, None)] * 2 + [(429, "LM-3002")] * 28
    assert consumed(responses) == 2 * USED <= 50 + ESTIMATE
    assert len(stub.vendor_calls()) == 2
    # Trued up: the next request is judged on the 22 tokens really used.
    stub.clear()
    assert code(
        httpx.post(
            f"{stack.url}/v1/chat/completions",
            timeout=20,
            headers={"Authorization": f"Bearer {tenant.api_key}"},
            json={"model": "gpt-4o-mini", "messages": PROMPT, "max_tokens": 8},
        )
    ) == (200, None)
