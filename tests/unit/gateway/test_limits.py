"""The limiter in this process: fixed one-minute windows on a clock the test moves, judged by
real Redis through SharedState ("redis") or by the per-process fallback ("process").

The clock starts on a minute boundary (tests.support.clock.START_S), so window 30,000,000
runs from +0 s to +60 s and Retry-After is the rest of it in whole seconds.
"""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
import redis
from django.conf import settings

from core.errors import CapacityExhausted, RequestRateLimited, TokenRateLimited
from gateway.admission import MODEL, WEB, Scope
from gateway.limits import Limiter
from tests.support.clock import START_S
from tests.support.shared_state import cut, restore, shared_state

WINDOW = int(START_S // 60)  # the window the clock starts in


@pytest.fixture
def group_id() -> int:
    return random.randrange(10**12, 2 * 10**12)  # no real group's concurrency slots


async def admit(limiter, scopes, *, group_id=1, concurrency=None, estimate=0, bulkhead=MODEL):
    return await limiter.admit(
        request_id=f"req-{uuid.uuid4().hex}",
        group_id=group_id,
        scopes=scopes,
        concurrency=concurrency,
        lease_s=30.0,
        tokens_estimate=estimate,
        bulkhead=bulkhead,
    )


async def refusal(limiter, scopes, **kwargs):
    """Return the refusal an admission raises (and fail the test if it is admitted)."""
    try:
        await admit(limiter, scopes, **kwargs)
    except (RequestRateLimited, TokenRateLimited, CapacityExhausted) as exc:
        return exc
    pytest.fail("admitted, expected a refusal")


def headers(admission, tokens_consumed=None) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in admission.headers(tokens_consumed)}


def redis_get(key: str) -> str | None:
    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    try:
        value = client.get(key)
        assert not isinstance(value, bytes)  # decode_responses=True
        return value
    finally:
        client.close()


def redis_set(key: str, value: int) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.set(key, value)
    finally:
        client.close()


def redis_delete(key: str) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.delete(key)
    finally:
        client.close()


# ---------------------------------------------------------------- one process, either judge


def test_a_key_rpm_admits_the_limit_then_refuses_for_the_rest_of_the_window(
    backend, tollgate, clock, tag
):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    scopes = (Scope(f"key:{tag}", rpm=3, tpm=0),)
    clock.at(15.4)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            admitted = [await admit(limiter, scopes) for _ in range(3)]
            return admitted, await refusal(limiter, scopes)

    admitted, refused = asyncio.run(scenario())

    assert [a.requests_used for a in admitted] == [[1], [2], [3]]
    assert [a.in_shared for a in admitted] == [backend == "redis"] * 3
    assert headers(admitted[-1]) == {
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "45s",
    }
    assert isinstance(refused, RequestRateLimited)
    assert (refused.code, refused.message) == ("LM-3001", "Request rate over limit for key.")
    assert refused.retry_after_s == 45  # +60 s, from +15 s


def test_web_actions_and_model_requests_hold_in_flight_caps_of_their_own(backend, tollgate, clock):
    tollgate(REPLICAS=1, INFLIGHT_MAX=1, WEB_INFLIGHT_MAX=2)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            web = [await admit(limiter, (), bulkhead=WEB) for _ in range(2)]
            web_refused = await refusal(limiter, (), bulkhead=WEB)
            model = await admit(limiter, ())  # web's two slots leave the model's one free
            model_refused = await refusal(limiter, ())
            for admission in (*web, model):
                await limiter.finish(admission, tokens=0)
            again = await admit(limiter, (), bulkhead=WEB)
            await limiter.finish(again, tokens=0)
            return web_refused, model_refused

    web_refused, model_refused = asyncio.run(scenario())

    assert (web_refused.code, web_refused.message, web_refused.retry_after_s) == (
        "LM-3003",
        "The fleet in-flight cap of web actions is reached.",
        1,
    )
    assert model_refused.message == "The fleet in-flight cap is reached."


def test_a_window_known_full_is_refused_without_asking_redis_until_the_limit_is_raised(
    redis_only, tollgate, clock, tag
):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    full = (Scope(f"key:{tag}", rpm=3, tpm=0),)
    raised = (Scope(f"key:{tag}", rpm=5, tpm=0),)
    key = f"tollgate:rl:rpm:key:{tag}:{WINDOW}"
    clock.at(15.0)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            for _ in range(3):
                await admit(limiter, full)
            redis_set(key, 0)  # had Redis been asked, it would admit this one now
            refused = await refusal(limiter, full)
            left = redis_get(key)
            return refused, left, await admit(limiter, raised)

    refused, left, after_raise = asyncio.run(scenario())

    assert type(refused) is RequestRateLimited
    assert (refused.code, refused.retry_after_s) == ("LM-3001", 45)
    assert left == "0"  # no admission script ran for the refusal
    assert (after_raise.in_shared, after_raise.requests_used) == (True, [1])


def test_a_scope_before_the_known_full_one_is_still_judged_by_redis(
    redis_only, tollgate, clock, tag
):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    group = Scope(f"group:{tag}", rpm=2, tpm=0)
    key = Scope(f"key:{tag}", rpm=0, tpm=100)  # limited, and full first: Redis says TPM

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            for _ in range(2):
                await admit(limiter, (group,))
            await admit(limiter, (key,), estimate=100)
            return await refusal(limiter, (key, group))

    refused = asyncio.run(scenario())

    assert (type(refused), refused.message) == (
        TokenRateLimited,
        "Token rate over limit for key.",
    )


def test_the_next_window_admits_again_from_zero(backend, tollgate, clock, tag):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    scopes = (Scope(f"key:{tag}", rpm=2, tpm=0),)
    clock.at(59.9)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            for _ in range(2):
                await admit(limiter, scopes)
            refused = await refusal(limiter, scopes)
            clock.at(60.0)
            return refused, await admit(limiter, scopes)

    refused, next_window = asyncio.run(scenario())

    assert refused.retry_after_s == 1
    assert (next_window.window, next_window.requests_used) == (WINDOW + 1, [1])
    assert headers(next_window)["x-ratelimit-reset-requests"] == "60s"


def test_windows_start_at_the_rate_epoch(backend, tollgate, clock, tag):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0, RATE_EPOCH_S=30)  # windows run from :30 to :30
    scopes = (Scope(f"key:{tag}", rpm=1, tpm=0),)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            clock.at(29.0)
            before = await admit(limiter, scopes)
            late = await refusal(limiter, scopes)
            clock.at(30.0)
            after = await admit(limiter, scopes)
            clock.at(60.0)
            return before, late, after, await refusal(limiter, scopes)

    before, late, after, on_the_minute = asyncio.run(scenario())

    assert (before.window, after.window) == (WINDOW - 1, WINDOW)
    assert late.retry_after_s == 1
    assert on_the_minute.retry_after_s == 30  # the minute is no boundary: +90 s is


def test_tpm_reserves_the_estimate_at_admission_and_the_finish_trues_it_up(
    backend, tollgate, clock, tag
):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    scopes = (Scope(f"key:{tag}", rpm=0, tpm=100),)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            burst = [await admit(limiter, scopes, estimate=37) for _ in range(3)]
            refused = await refusal(limiter, scopes, estimate=37)  # 111 >= 100
            for admission in burst:
                await limiter.finish(admission, tokens=11)
            return burst, refused, await admit(limiter, scopes, estimate=37)

    burst, refused, after = asyncio.run(scenario())

    assert [a.tokens_used for a in burst] == [[0], [37], [74]]
    assert isinstance(refused, TokenRateLimited)
    assert (refused.code, refused.message) == ("LM-3002", "Token rate over limit for key.")
    assert after.tokens_used == [33]  # 3 x 11 tokens really used
    assert headers(after, tokens_consumed=11) == {
        "x-ratelimit-limit-tokens": "100",
        "x-ratelimit-remaining-tokens": "56",
        "x-ratelimit-reset-tokens": "60s",
        "x-tokens-remaining": "56",
        "x-tokens-consumed": "11",
    }


def test_the_group_concurrency_cap_holds_a_slot_until_the_finish(
    backend, tollgate, clock, group_id
):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            held = [await admit(limiter, (), group_id=group_id, concurrency=2) for _ in range(2)]
            refused = await refusal(limiter, (), group_id=group_id, concurrency=2)
            other = await admit(limiter, (), group_id=group_id + 1, concurrency=2)
            await limiter.finish(held[0], tokens=0)
            again = await admit(limiter, (), group_id=group_id, concurrency=2)
            for admission in (held[1], other, again):
                await limiter.finish(admission, tokens=0)
            return refused

    refused = asyncio.run(scenario())

    assert isinstance(refused, CapacityExhausted)
    assert (refused.code, refused.message) == ("LM-3003", "The group concurrency cap is reached.")
    assert refused.retry_after_s == 1


# ---------------------------------------------------------------- without Redis


def test_without_redis_each_replica_admits_its_share_of_every_limit(tollgate, settings, clock, tag):
    settings.REDIS_URL = ""
    tollgate(REPLICAS=2, INFLIGHT_MAX=4)
    rpm = (Scope(f"key:{tag}", rpm=5, tpm=0),)
    tpm = (Scope(f"key:{tag}-t", rpm=0, tpm=100),)

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            by_rpm = [await admit(limiter, rpm) for _ in range(2)]  # 5 // 2 = 2
            rpm_refused = await refusal(limiter, rpm)
            for admission in by_rpm:
                await limiter.finish(admission, tokens=0)
            by_tpm = [await admit(limiter, tpm, estimate=30) for _ in range(2)]  # 0, 30 < 50
            tpm_refused = await refusal(limiter, tpm, estimate=30)  # 60 >= 50
            inflight_refused = await refusal(limiter, ())  # 2 held of 4 // 2
            for admission in by_tpm:
                await limiter.finish(admission, tokens=30)
            await admit(limiter, (), group_id=7, concurrency=3)  # 3 // 2 = 1 slot here
            concurrency_refused = await refusal(limiter, (), group_id=7, concurrency=3)
            return rpm_refused, tpm_refused, inflight_refused, concurrency_refused

    rpm_refused, tpm_refused, inflight_refused, concurrency_refused = asyncio.run(scenario())

    assert (type(rpm_refused), rpm_refused.retry_after_s) == (RequestRateLimited, 60)
    assert type(tpm_refused) is TokenRateLimited
    assert (type(inflight_refused), inflight_refused.message) == (
        CapacityExhausted,
        "The fleet in-flight cap is reached.",
    )
    assert concurrency_refused.message == "The group concurrency cap is reached."


# ---------------------------------------------------------------- shared through Redis


def test_two_replicas_count_one_key_rpm_once_in_redis(redis_only, tollgate, clock, tag):
    tollgate(REPLICAS=2, INFLIGHT_MAX=0)
    scopes = (Scope(f"key:{tag}", rpm=3, tpm=0),)

    async def scenario():
        async with shared_state() as one, shared_state() as two:
            a, b = Limiter(one, clock=clock), Limiter(two, clock=clock)
            admitted = [await admit(limiter, scopes) for limiter in (a, b, a)]
            return admitted, await refusal(b, scopes)

    admitted, refused = asyncio.run(scenario())

    assert [a.requests_used for a in admitted] == [[1], [2], [3]]
    assert type(refused) is RequestRateLimited
    assert redis_get(f"tollgate:rl:rpm:key:{tag}:{WINDOW}") == "3"


def test_while_redis_is_down_a_replica_keeps_its_share_of_what_was_left_until_the_window_ends(
    redis_only, retry_redis_at_once, tollgate, clock, tag
):
    tollgate(REPLICAS=2, INFLIGHT_MAX=0)
    scopes = (Scope(f"key:{tag}", rpm=10, tpm=0),)
    key = f"tollgate:rl:rpm:key:{tag}"

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            for _ in range(4):
                await admit(limiter, scopes)  # Redis counts 4
            live = cut(shared)
            alone = [await admit(limiter, scopes) for _ in range(3)]  # (10 - 4) // 2 = 3
            refused_alone = await refusal(limiter, scopes)
            restore(shared, live)
            refused_back = await refusal(limiter, scopes)  # the share binds till +60 s
            pushed = redis_get(f"{key}:{WINDOW}")
            clock.at(60.0)
            return alone, refused_alone, refused_back, pushed, await admit(limiter, scopes)

    alone, refused_alone, refused_back, pushed, next_window = asyncio.run(scenario())

    assert [a.requests_used for a in alone] == [[5], [6], [7]]
    assert [a.in_shared for a in alone] == [False] * 3
    assert (type(refused_alone), type(refused_back)) == (RequestRateLimited, RequestRateLimited)
    assert pushed == "7"  # what it admitted alone reached Redis before Redis judged again
    assert (next_window.in_shared, next_window.requests_used) == (True, [1])
    assert redis_get(f"{key}:{WINDOW + 1}") == "1"


def test_a_redis_that_lost_the_window_is_brought_up_to_what_the_replica_saw(
    redis_only, retry_redis_at_once, tollgate, clock, tag
):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    scopes = (Scope(f"key:{tag}", rpm=10, tpm=0),)
    key = f"tollgate:rl:rpm:key:{tag}:{WINDOW}"

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)
            for _ in range(4):
                await admit(limiter, scopes)
            redis_delete(key)  # as a Redis restarted empty has lost it
            live = cut(shared)
            alone = await admit(limiter, scopes)
            restore(shared, live)
            return alone, await admit(limiter, scopes)

    alone, back = asyncio.run(scenario())

    assert (alone.in_shared, alone.requests_used) == (False, [5])
    assert (back.in_shared, back.requests_used) == (True, [6])
    assert redis_get(key) == "6"


# ---------------------------------------------------------------- a hash read for the breakers


def test_a_peeked_hash_is_read_in_the_admission_script_and_survives_a_script_flush(
    redis_only, tollgate, clock, tag
):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    scopes = (Scope(f"key:{tag}", rpm=5, tpm=0),)
    peek = (f"tollgate:cb:{tag}|m", ("state", "failures", "never-set"))
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.hset(peek[0], mapping={"state": 0, "failures": 2})
    finally:
        client.close()

    async def scenario():
        async with shared_state() as shared:
            limiter = Limiter(shared, clock=clock)

            async def admit_peeking(request_id):
                return await limiter.admit(
                    request_id=request_id,
                    group_id=1,
                    scopes=scopes,
                    concurrency=None,
                    lease_s=30.0,
                    peek=peek,
                )

            first = await admit_peeking("peek-1")
            await shared.client.script_flush()  # as a Redis restart forgets its scripts
            return first, await admit_peeking("peek-2")

    try:
        first, second = asyncio.run(scenario())
    finally:
        redis_delete(peek[0])

    assert (first.requests_used, first.peeked) == ([1], [b"0", b"2", None])
    assert (second.requests_used, second.peeked) == ([2], [b"0", b"2", None])


def test_without_redis_nothing_is_peeked(tollgate, settings, clock, tag):
    tollgate(REPLICAS=1, INFLIGHT_MAX=0)
    settings.REDIS_URL = ""

    async def scenario():
        async with shared_state() as shared:
            return await Limiter(shared, clock=clock).admit(
                request_id="peek-local",
                group_id=1,
                scopes=(Scope(f"key:{tag}", rpm=5, tpm=0),),
                concurrency=None,
                lease_s=30.0,
                peek=(f"tollgate:cb:{tag}|m", ("state", "failures")),
            )

    admission = asyncio.run(scenario())

    assert (admission.in_shared, admission.requests_used, admission.peeked) == (False, [1], None)
