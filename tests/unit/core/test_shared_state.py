"""The request path's pipelined Redis connection (SharedState.run), against real Redis."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ResponseError

from core.shared_state import Script, SharedStateDown
from tests.support.shared_state import shared_state

ECHO = Script("return {KEYS[1], ARGV[1]}")


def test_concurrent_callers_each_get_their_own_replies_in_one_connection(redis_only, tag):
    async def scenario():
        async with shared_state() as shared:
            calls = [
                shared.run(("SET", f"tollgate:{tag}:{n}", n), ("GET", f"tollgate:{tag}:{n}"))
                for n in range(50)
            ]
            return await asyncio.gather(*calls)

    replies = asyncio.run(scenario())

    assert replies == [[b"OK", str(n).encode()] for n in range(50)]


def test_a_reply_that_comes_after_its_caller_timed_out_goes_to_nobody(redis_only, tag, tollgate):
    tollgate(REDIS_TIMEOUT_MS=100)
    key = f"tollgate:{tag}:empty"

    async def scenario():
        async with shared_state() as shared:
            with pytest.raises(SharedStateDown):
                await shared.run(("BLPOP", key, "0.3"))  # answers (nil) after 300 ms
            shared._down_until = 0.0  # try Redis again at once (the test's own timing)
            await asyncio.sleep(0.4)  # the late reply has arrived meanwhile
            return await shared.run(("PING",), ("ECHO", "mine"))

    assert asyncio.run(scenario()) == [b"PONG", b"mine"]


def test_a_script_redis_forgot_is_sent_again_with_its_text(redis_only, tag):
    async def scenario():
        async with shared_state() as shared:
            await shared.run(("SCRIPT", "FLUSH"))
            return await shared.run(ECHO.command([f"tollgate:{tag}"], ["x"]))

    assert asyncio.run(scenario()) == [[f"tollgate:{tag}".encode(), b"x"]]


def test_an_error_reply_is_raised_and_redis_stays_shared(redis_only, tag):
    async def scenario():
        async with shared_state() as shared:
            with pytest.raises(ResponseError):
                await shared.run(("INCR", f"tollgate:{tag}:n"), ("NOT-A-COMMAND",))
            return shared.degraded, await shared.run(("GET", f"tollgate:{tag}:n"))

    assert asyncio.run(scenario()) == (False, [b"1"])
