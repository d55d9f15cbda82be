"""Circuit breakers shared by the fleet: two gateway processes, one Redis.

TOLLGATE_BREAKER_FAILURES=2 (two failed links open a breaker), cooldown 2 s (the harness
default). A failed link is one request's link after its tries, not each try.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import httpx
import pytest
from django.conf import settings

from tests.support.metrics import metric
from tests.support.profiles import api_profiles, fast_profiles
from tests.support.services import HAS_REDIS, requires_redis
from tests.support.stacks import own_stack
from tests.support.waits import wait_until

MODEL = "gpt-4o-mini"
BREAKER = "tollgate:cb:stub-openai|gpt-4o-mini"
PROMPT = [{"role": "user", "content": "are you there"}]
OPEN, HALF_OPEN, CLOSED = 2.0, 1.0, 0.0


@pytest.fixture(scope="module")
def fleet(module_gateways):
    if not HAS_REDIS:
        pytest.skip("needs Redis: set REDIS_URL")
    return [module_gateways(TOLLGATE_BREAKER_FAILURES="2") for _ in range(2)]


@pytest.fixture
def pair(transactional_db, fleet, stub):
    first = own_stack(fleet[0], stub, fast_profiles(stub.url, timeout_s=1, idle_s=1))
    fleet[1].reload()
    return first, fleet[0], fleet[1]


def ask(gateway, tenant, **extra) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        timeout=20,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={"model": MODEL, "messages": PROMPT, **extra},
    )


def code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code == 200:
        return 200, None
    return response.status_code, response.json()["error"]["code"]


def redis_breaker() -> dict[str, str]:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    try:
        # cast: decode_responses=True gives str, which redis-py's types do not follow.
        return cast("dict[str, str]", client.hgetall(BREAKER))
    finally:
        client.close()


def open_the_breaker(stack, gateway, tenant) -> None:
    """Two failed requests (two tries each) open the breaker."""
    stack.stub.faults({"kind": "500", "times": 4, "match": {"model": MODEL}})
    assert [code(ask(gateway, tenant)) for _ in range(2)] == [(502, "LM-5001")] * 2
    assert len(stack.stub.vendor_calls()) == 4
    assert redis_breaker()["state"] == "2"


def wait_for_cooldown() -> None:
    opened = float(redis_breaker()["opened"])
    wait_until(
        lambda: time.time() >= opened + 2.05,
        timeout_s=5,
        interval_s=0.02,
        what="the breaker's cooldown",
    )


def circuit_state(gateway) -> float:
    return metric(gateway.url, "tollgate_circuit_state", provider="stub-openai", model=MODEL)


async def many(requests: list[tuple]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{gw.url}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {tenant.api_key}"},
                    json={"model": MODEL, "messages": PROMPT},
                )
                for gw, tenant in requests
            )
        )


@requires_redis
def test_breaker_opens_fleet_wide_and_admits_exactly_one_probe(pair):
    stack, a, b = pair
    tenant = stack.tenant()

    open_the_breaker(stack, a, tenant)

    refused = ask(b, tenant)  # the other replica fails fast, without calling upstream
    assert code(refused) == (503, "LM-5003")
    assert refused.headers["retry-after"] == "2"
    assert len(stack.stub.vendor_calls()) == 4
    assert (circuit_state(a), circuit_state(b)) == (OPEN, OPEN)

    wait_for_cooldown()
    # The probe answers slowly (8 tokens x 80 ms, inside its 1 s deadline) while twelve
    # requests race for it.
    stack.stub.faults({"kind": "slow", "delay_ms": 80, "match": {"model": MODEL}})
    responses = asyncio.run(many([(a if i % 2 else b, tenant) for i in range(12)]))

    assert sorted(code(r) for r in responses) == [(200, None)] + [(503, "LM-5003")] * 11
    assert len(stack.stub.vendor_calls()) == 5  # exactly one probe reached the vendor
    assert redis_breaker()["state"] == "0"  # its success closed the breaker

    assert code(ask(b, tenant)) == (200, None)
    assert code(ask(a, tenant)) == (200, None)
    assert len(stack.stub.vendor_calls()) == 7
    assert (circuit_state(a), circuit_state(b)) == (CLOSED, CLOSED)


@requires_redis
def test_a_probe_that_hangs_fails_at_its_deadline_and_reopens_the_breaker(pair):
    stack, a, b = pair
    tenant = stack.tenant()
    open_the_breaker(stack, a, tenant)
    wait_for_cooldown()
    stack.stub.faults({"kind": "hang", "times": 2, "match": {"model": MODEL}})

    async def probe_and_bystander():
        async with httpx.AsyncClient(timeout=30) as client:
            probe = asyncio.create_task(
                client.post(
                    f"{a.url}/v1/chat/completions",
                    json={"model": MODEL, "messages": PROMPT},
                    headers={"Authorization": f"Bearer {tenant.api_key}"},
                )
            )
            while len(stack.stub.vendor_calls()) < 5:  # the probe reached the vendor
                await asyncio.sleep(0.02)
            bystander = await client.post(
                f"{b.url}/v1/chat/completions",
                json={"model": MODEL, "messages": PROMPT},
                headers={"Authorization": f"Bearer {tenant.api_key}"},
            )
            return await probe, bystander

    started = time.monotonic()
    probe, bystander = asyncio.run(probe_and_bystander())

    assert code(bystander) == (503, "LM-5003")  # half-open: the probe is out
    assert code(probe) == (504, "LM-5002")  # two tries, each at its 1 s deadline
    assert 2.0 <= time.monotonic() - started < 4.0
    assert len(stack.stub.vendor_calls()) == 6
    assert redis_breaker()["state"] == "2"  # the hung probe counted as a failure
    assert code(ask(b, tenant)) == (503, "LM-5003")
    assert len(stack.stub.vendor_calls()) == 6


@requires_redis
def test_a_cancelled_probe_is_handed_back(pair):
    stack, a, b = pair
    tenant = stack.tenant()
    open_the_breaker(stack, a, tenant)
    wait_for_cooldown()
    stack.stub.faults({"kind": "hang", "match": {"model": MODEL}})

    # A streamed probe whose client gives up while the vendor hangs.
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{a.url}/v1/chat/completions",
            timeout=0.5,
            headers={"Authorization": f"Bearer {tenant.api_key}"},
            json={"model": MODEL, "messages": PROMPT, "stream": True},
        )
    wait_until(
        lambda: redis_breaker()["probe"] == "",
        timeout_s=5,
        what="the cancelled probe to be handed back",
    )
    assert redis_breaker()["state"] == "1"  # still half-open: a cancellation judges nothing

    assert code(ask(b, tenant)) == (200, None)  # the next request takes the probe at once
    assert redis_breaker()["state"] == "0"
    assert len(stack.stub.vendor_calls()) == 6


@requires_redis
def test_a_probe_refused_for_the_clients_wallet_is_handed_back(pair):
    stack, a, b = pair
    funded = stack.tenant()
    broke = stack.tenant(wallet_micro=0)
    open_the_breaker(stack, a, funded)
    wait_for_cooldown()

    refused = ask(a, broke)

    assert code(refused) == (402, "LM-4002")
    assert redis_breaker()["state"] == "1" and redis_breaker()["probe"] == ""
    assert code(ask(b, funded)) == (200, None)
    assert redis_breaker()["state"] == "0"
    assert len(stack.stub.vendor_calls()) == 5


@pytest.fixture(scope="module")
def lone_gateway(module_gateways):
    return module_gateways(TOLLGATE_BREAKER_FAILURES="2")


def test_breaker_opens_fails_fast_and_closes_in_one_process(transactional_db, lone_gateway, stub):
    stack = own_stack(lone_gateway, stub, fast_profiles(stub.url, timeout_s=1, idle_s=1))
    tenant = stack.tenant()
    gateway = stack.gateway

    stub.faults({"kind": "500", "times": 4, "match": {"model": MODEL}})
    assert [code(ask(gateway, tenant)) for _ in range(2)] == [(502, "LM-5001")] * 2
    refused = ask(gateway, tenant)
    assert code(refused) == (503, "LM-5003")
    assert refused.json()["error"]["message"] == "Upstream circuit open; failing fast."
    assert circuit_state(gateway) == OPEN
    assert len(stub.vendor_calls()) == 4

    served = wait_until(
        lambda: (r := ask(gateway, tenant)).status_code == 200 and r,
        timeout_s=5,
        interval_s=0.1,
        what="the breaker to admit its probe",
    )
    assert served.json()["model"] == MODEL
    assert circuit_state(gateway) == CLOSED
    assert len(stub.vendor_calls()) == 5


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "o4-mini", "input": "are you there"}),
        ("/v1/embeddings", {"model": "text-embedding-3-small", "input": "are you there"}),
        ("/v1/moderations", {"model": "omni-moderation-latest", "input": "are you there"}),
    ],
    ids=["responses", "embeddings", "moderations"],
)
def test_responses_embeddings_and_moderations_open_the_breaker_like_chat(
    transactional_db, lone_gateway, stub, path, body
):
    stack = own_stack(lone_gateway, stub, api_profiles(stub.url))
    tenant = stack.tenant()

    def post() -> httpx.Response:
        return httpx.post(
            f"{stack.url}{path}",
            timeout=20,
            headers={"Authorization": f"Bearer {tenant.api_key}"},
            json=body,
        )

    stub.faults({"kind": "500", "times": 4, "match": {"model": body["model"]}})
    assert [code(post()) for _ in range(2)] == [(502, "LM-5001")] * 2
    refused = post()

    assert code(refused) == (503, "LM-5003")
    assert [c["path"] for c in stub.vendor_calls()] == [path] * 4  # two tries, twice; then none
    served = wait_until(
        lambda: (r := post()).status_code == 200 and r,
        timeout_s=5,
        interval_s=0.1,
        what="the breaker to admit its probe",
    )
    assert served.json()["model"] == body["model"]
