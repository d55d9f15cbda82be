"""Redis stopped mid-run and restarted: the gateway keeps serving, then shares state again.

Each test runs its own redis-server (tests.conftest.own_redis) and a gateway pointed at it,
so stopping it disturbs nobody else. While Redis is away, limits are per process at
(fleet limit / TOLLGATE_REPLICAS), breakers are per process, no request waits on Redis longer
than TOLLGATE_REDIS_TIMEOUT_MS, tollgate_redis_degraded is 1 and one log line says so.
"""

from __future__ import annotations

import time

import httpx
import redis

from tests.support.metrics import metric
from tests.support.profiles import fast_profiles
from tests.support.services import requires_redis
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

PROMPT = [{"role": "user", "content": "still there"}]
DOWN_LINE = "Redis unavailable (ConnectionError): limits and breakers fall back to this process"
BACK_LINE = "Redis is back: limits and breakers are shared again"


def ask(stack, key: str, model: str = "gpt-4o-mini") -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/chat/completions",
        timeout=20,
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": PROMPT},
    )


def code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code == 200:
        return 200, None
    return response.status_code, response.json()["error"]["code"]


def new_key(tenant, **limits) -> tuple[int, str]:
    from accounts.models import Group
    from accounts.services import api_key_create

    api_key, secret = api_key_create(group=Group.objects.get(pk=tenant.group_id), **limits)
    return api_key.pk, secret


def readiness(stack) -> tuple[int, dict]:
    response = httpx.get(f"{stack.url}/readyz", timeout=5)
    return response.status_code, response.json()["checks"]


def degraded(stack) -> float:
    return metric(stack.url, "tollgate_redis_degraded")


@requires_redis
def test_redis_outage_keeps_serving_with_per_process_state_and_recovers(
    transactional_db, own_redis, module_gateways, stub, rate_window
):
    gateway = module_gateways(
        REDIS_URL=own_redis.url,
        TOLLGATE_REPLICAS="2",
        TOLLGATE_BREAKER_FAILURES="2",
        **rate_window.env,
    )
    stack = own_stack(gateway, stub, fast_profiles(stub.url))
    tenant = stack.tenant()
    assert code(ask(stack, tenant.api_key)) == (200, None)
    assert readiness(stack) == (200, {"database": True, "redis": True})
    assert degraded(stack) == 0

    own_redis.stop()

    # Serving goes on, and says once that it is degraded.
    during = [ask(stack, tenant.api_key) for _ in range(3)]
    assert [code(r) for r in during] == [(200, None)] * 3
    assert degraded(stack) == 1
    assert readiness(stack) == (503, {"database": True, "redis": False})
    # Per-process limits: a key of 4 requests a minute over 2 replicas gets 2 here.
    _, limited = new_key(tenant, rpm_limit=4)
    assert [code(ask(stack, limited)) for _ in range(3)] == [
        (200, None),
        (200, None),
        (429, "LM-3001"),
    ]
    # Per-process breakers: two failed links open gpt-4o's breaker in this process.
    stub.faults({"kind": "500", "times": 4, "match": {"model": "gpt-4o"}})
    assert [code(ask(stack, tenant.api_key, "gpt-4o")) for _ in range(3)] == [
        (502, "LM-5001"),
        (502, "LM-5001"),
        (503, "LM-5003"),
    ]
    assert [c["model"] for c in stub.vendor_calls()].count("gpt-4o") == 4
    assert gateway.log().count(DOWN_LINE) == 1
    # Rows of requests served meanwhile are not lost.
    rows = usage_rows([r.headers["x-request-id"] for r in during], expect=3)
    assert [row.status for row in rows] == [200, 200, 200]

    own_redis.start()  # same port, empty

    wait_until(lambda: degraded(stack) == 0, timeout_s=10, what="the gateway to use Redis again")
    assert gateway.log().count(BACK_LINE) == 1
    assert readiness(stack) == (200, {"database": True, "redis": True})
    # Limits are shared again: counted in Redis, at the fleet-wide limit.
    key_id, shared_key = new_key(tenant, rpm_limit=4)
    served = ask(stack, shared_key)
    assert code(served) == (200, None)
    assert served.headers["x-ratelimit-remaining-requests"] == "3"
    client = redis.Redis(port=own_redis.port, decode_responses=True)
    window = rate_window.number()
    assert client.get(f"tollgate:rl:rpm:key:{key_id}:{window}") == "1"
    # Breakers are shared again: a failed link is counted in Redis, a success resets it.
    stub.clear()
    stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o"}})
    assert code(ask(stack, tenant.api_key, "gpt-4o")) == (502, "LM-5001")
    assert client.hget("tollgate:cb:stub-openai|gpt-4o", "failures") == "1"
    assert code(ask(stack, tenant.api_key, "gpt-4o")) == (200, None)
    assert client.hget("tollgate:cb:stub-openai|gpt-4o", "failures") == "0"
    client.close()
    assert gateway.log().count(DOWN_LINE) == 1
    assert rate_window.number() == window == 0, "the test left its rate window"


@requires_redis
def test_a_hung_redis_costs_a_request_no_more_than_the_redis_timeout(
    transactional_db, own_redis, module_gateways, stub
):
    gateway = module_gateways(REDIS_URL=own_redis.url, TOLLGATE_REDIS_TIMEOUT_MS="200")
    stack = own_stack(gateway, stub, fast_profiles(stub.url))
    tenant = stack.tenant()
    assert code(ask(stack, tenant.api_key)) == (200, None)

    own_redis.pause()  # SIGSTOP: connections accept, nothing ever answers
    try:
        # Requests for 2.5 s: past two of the fallback's 1 s intervals between Redis tries.
        latencies = []
        first = time.monotonic()
        while time.monotonic() - first < 2.5:
            started = time.monotonic()
            assert code(ask(stack, tenant.api_key)) == (200, None)
            latencies.append(time.monotonic() - started)
        started = time.monotonic()
        assert readiness(stack) == (503, {"database": True, "redis": False})
        assert time.monotonic() - started < 0.6
        assert degraded(stack) == 1
    finally:
        own_redis.resume()

    assert max(latencies) < 0.6, latencies  # one 200 ms Redis timeout at most, plus serving
    assert gateway.log().count("Redis unavailable (TimeoutError)") == 1
    wait_until(lambda: degraded(stack) == 0, timeout_s=10, what="the gateway to use Redis again")
    assert code(ask(stack, tenant.api_key)) == (200, None)
