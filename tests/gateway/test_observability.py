"""/metrics, /healthz, /readyz, and what never reaches a client or a log: vendor bodies.

Counters are per process and cumulative, so each test reads them before and after and
asserts the exact difference.
"""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from tests.support.metrics import metric, metric_samples
from tests.support.processes import INTERNAL_TOKEN
from tests.support.profiles import PLATFORM_KEY, fast_profiles, stub_profiles
from tests.support.services import HAS_REDIS
from tests.support.stacks import own_stack
from tests.support.waits import wait_until

PROMPT = [{"role": "user", "content": "measure me"}]


@pytest.fixture
def ostack(transactional_db, tolerant_gateway, stub):
    return own_stack(tolerant_gateway, stub, stub_profiles(stub.url))


def test_healthz_and_readyz_report_the_dependencies(ostack):
    health = httpx.get(f"{ostack.url}/healthz")
    ready = httpx.get(f"{ostack.url}/readyz")

    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    expected = {"database": True, **({"redis": True} if HAS_REDIS else {})}
    assert (ready.status_code, ready.json()) == (200, {"ready": True, "checks": expected})


def test_metrics_count_requests_by_route_status_and_code(ostack):
    tenant = ostack.tenant()
    url = ostack.url
    auth = {"Authorization": f"Bearer {tenant.api_key}"}
    series = [
        ("chat", "200", "ok"),
        ("chat", "401", "LM-1001"),
        ("messages", "200", "ok"),
        ("messages", "400", "LM-2001"),
        ("internal.complete", "200", "ok"),
    ]
    before = metric_samples(url)

    httpx.post(
        f"{url}/v1/chat/completions",
        headers=auth,
        json={"model": "gpt-4o-mini", "messages": PROMPT},
    )
    httpx.post(f"{url}/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": PROMPT})
    httpx.post(
        f"{url}/v1/messages",
        headers=auth,
        json={"model": "claude-3-5-haiku", "max_tokens": 10, "messages": PROMPT},
    )
    httpx.post(
        f"{url}/v1/messages", headers=auth, json={"model": "claude-3-5-haiku", "messages": PROMPT}
    )  # no max_tokens
    httpx.post(
        f"{url}/internal/complete",
        headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"},
        json={
            "group": tenant.group_id,
            "request_id": "obs-1",
            "model": "gpt-4o-mini",
            "messages": PROMPT,
        },
    )
    after = metric_samples(url)

    def count(samples, route, status, code):
        labels = (("code", code), ("route", route), ("status", status))
        return samples.get(("tollgate_requests_total", labels), 0.0)

    assert [count(after, *s) - count(before, *s) for s in series] == [1, 1, 1, 1, 1]
    # Upstream latency: one observation per upstream call, by provider.
    latency = "tollgate_upstream_latency_seconds_count"
    assert [
        after.get((latency, (("provider", p),)), 0) - before.get((latency, (("provider", p),)), 0)
        for p in ("stub-openai", "stub-anthropic")
    ] == [2, 1]
    # Breaker state by (provider, model): closed.
    assert metric(url, "tollgate_circuit_state", provider="stub-openai", model="gpt-4o-mini") == 0
    if HAS_REDIS:
        assert metric(url, "tollgate_redis_degraded") == 0


def test_failed_and_timed_out_upstream_calls_are_measured_too(
    transactional_db, tolerant_gateway, stub
):
    stack = own_stack(tolerant_gateway, stub, fast_profiles(stub.url, timeout_s=1))
    tenant = stack.tenant()
    name = "tollgate_upstream_latency_seconds"
    before = metric_samples(stack.url)
    stub.faults({"kind": "500"}, {"kind": "hang"})

    response = httpx.post(
        f"{stack.url}/v1/chat/completions",
        timeout=10,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={"model": "gpt-4o-mini", "messages": PROMPT},
    )

    assert (response.status_code, response.json()["error"]["code"]) == (504, "LM-5002")
    after = metric_samples(stack.url)

    def delta(sample: str, **labels) -> float:
        key = (sample, tuple(sorted({"provider": "stub-openai", **labels}.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta(f"{name}_count") == 2  # the 500 and the timeout
    assert delta(f"{name}_bucket", le="0.5") == 1  # the 500 was quick
    assert delta(f"{name}_bucket", le="2.5") == 2
    assert 0.95 <= delta(f"{name}_sum") < 1.5  # the timeout waited its full 1 s deadline


def test_in_flight_gauge_follows_a_request(ostack):
    tenant = ostack.tenant()
    ostack.stub.faults({"kind": "slow", "delay_ms": 100})  # 8 tokens: 0.8 s in flight
    assert metric(ostack.url, "tollgate_in_flight") == 0
    done = []

    def send() -> None:
        done.append(
            httpx.post(
                f"{ostack.url}/v1/chat/completions",
                timeout=10,
                headers={"Authorization": f"Bearer {tenant.api_key}"},
                json={"model": "gpt-4o-mini", "messages": PROMPT},
            )
        )

    thread = threading.Thread(target=send)
    thread.start()
    wait_until(
        lambda: metric(ostack.url, "tollgate_in_flight") == 1,
        timeout_s=5,
        interval_s=0.02,
        what="the request to be in flight",
    )
    thread.join(10)

    assert done[0].status_code == 200
    assert metric(ostack.url, "tollgate_in_flight") == 0


@pytest.fixture(scope="module")
def chatty_gateway(module_gateways):
    return module_gateways(TOLLGATE_LOG_LEVEL="DEBUG", TOLLGATE_BREAKER_FAILURES="1000000")


def test_vendor_bodies_and_keys_never_reach_the_client_or_the_log(
    transactional_db, chatty_gateway, stub
):
    stack = own_stack(chatty_gateway, stub, stub_profiles(stub.url))
    tenant = stack.tenant()
    seen = []

    async def every_way():
        async with httpx.AsyncClient(timeout=10) as client:
            for kind in ("401", "403"):
                for model in ("gpt-4o-mini", "claude-3-5-haiku"):
                    for stream in (False, True):
                        stub.faults({"kind": kind})
                        seen.append(
                            await client.post(
                                f"{stack.url}/v1/chat/completions",
                                headers={"Authorization": f"Bearer {tenant.api_key}"},
                                json={"model": model, "messages": PROMPT, "stream": stream},
                            )
                        )
                        stub.faults({"kind": kind})
                        seen.append(
                            await client.post(
                                f"{stack.url}/v1/messages",
                                headers={"x-api-key": tenant.api_key},
                                json={
                                    "model": model,
                                    "max_tokens": 10,
                                    "messages": PROMPT,
                                    "stream": stream,
                                },
                            )
                        )

    asyncio.run(every_way())

    assert [(r.status_code, r.json()["error"]["code"]) for r in seen] == [(502, "LM-5001")] * 16
    calls = stub.vendor_calls()
    assert len(calls) == 16 and {c["status"] for c in calls} == {401, 403}
    for response in seen:
        exposed = response.text + repr(response.headers.raw)
        assert PLATFORM_KEY not in exposed
        assert "x-stub-echo-key" not in exposed.lower()
        assert "Incorrect API key" not in exposed and "not allowed to access" not in exposed
    log = stack.gateway.log()  # written at DEBUG, the most a gateway ever says
    assert PLATFORM_KEY not in log
    assert "Incorrect API key" not in log and "not allowed to access" not in log
