"""Circuit breakers in this process, judged by real Redis through SharedState ("redis") or by
the per-process fallback ("process"), on a clock the test moves: closed -> open after the
threshold of consecutive failures -> one probe after the cooldown -> closed or open again.

Threshold 3, cooldown 30 s; every board is built on the test's clock.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.breakers import BreakerBoard
from tests.support.shared_state import cut, shared_state

MODEL = "m"


@pytest.fixture(autouse=True)
def breaker_settings(tollgate):
    tollgate(BREAKER_FAILURES=3, BREAKER_COOLDOWN_S=30)


def state(ticket) -> str:
    """Name what an acquire gave: refused (open or probing), a probe, or a plain call."""
    if ticket is None:
        return "refused"
    return "probe" if ticket.probe else ("clean" if ticket.clean else "counted")


async def fail(board, scope: str, times: int) -> None:
    for _ in range(times):
        await board.failure(await board.acquire(scope, MODEL))


def run(scenario, clock):
    async def main():
        async with shared_state() as shared:
            return await scenario(BreakerBoard(shared, clock=clock))

    return asyncio.run(main())


def test_a_breaker_opens_after_the_threshold_of_consecutive_failures(backend, clock, tag):
    async def scenario(board):
        seen = [state(await board.acquire(tag, MODEL))]
        for _ in range(3):
            await fail(board, tag, 1)
            seen.append(state(await board.acquire(tag, MODEL)))
        return seen

    assert run(scenario, clock) == ["clean", "counted", "counted", "refused"]


def test_a_success_while_closed_resets_the_count_of_failures(backend, clock, tag):
    async def scenario(board):
        await fail(board, tag, 2)
        await board.success(await board.acquire(tag, MODEL))
        after_success = state(await board.acquire(tag, MODEL))
        await fail(board, tag, 2)
        return after_success, state(await board.acquire(tag, MODEL))

    assert run(scenario, clock) == (
        "clean",
        "counted",
    )  # 2 failures since the success: still closed


def test_an_open_breaker_admits_one_probe_fleet_wide_after_the_cooldown(backend, clock, tag):
    async def scenario(board):
        clock.at(10.0)
        await fail(board, tag, 3)
        seen = []
        for at in (39.9, 40.0, 40.0, 100.0):
            clock.at(at)
            seen.append(state(await board.acquire(tag, MODEL)))
        return seen

    # The probe's lease (120 s by default) keeps every other call out while it runs.
    assert run(scenario, clock) == ["refused", "probe", "refused", "refused"]


def test_a_probes_success_closes_the_breaker(backend, clock, tag):
    async def scenario(board):
        await fail(board, tag, 3)
        clock.at(30.0)
        probe = await board.acquire(tag, MODEL)
        await board.success(probe)
        return state(probe), state(await board.acquire(tag, MODEL))

    assert run(scenario, clock) == ("probe", "clean")


def test_a_probes_failure_opens_the_breaker_for_another_cooldown(backend, clock, tag):
    async def scenario(board):
        await fail(board, tag, 3)
        clock.at(45.0)
        await board.failure(await board.acquire(tag, MODEL))
        seen = []
        for at in (45.0, 74.9, 75.0):
            clock.at(at)
            seen.append(state(await board.acquire(tag, MODEL)))
        return seen

    assert run(scenario, clock) == ["refused", "refused", "probe"]


def test_a_released_probe_lets_the_next_call_probe_at_once(backend, clock, tag):
    async def scenario(board):
        await fail(board, tag, 3)
        clock.at(30.0)
        await board.release(await board.acquire(tag, MODEL))  # its answer said nothing
        return state(await board.acquire(tag, MODEL))

    assert run(scenario, clock) == "probe"


def test_a_hung_probe_lapses_at_its_lease_and_its_late_answer_changes_nothing(backend, clock, tag):
    async def scenario(board):
        await fail(board, tag, 3)
        clock.at(30.0)
        hung = await board.acquire(tag, MODEL, lease_s=5.0)
        clock.at(34.9)
        during = state(await board.acquire(tag, MODEL))
        clock.at(35.0)
        second = await board.acquire(tag, MODEL, lease_s=5.0)
        await board.success(hung)  # the first probe answers at last: not the probe any more
        still = state(await board.acquire(tag, MODEL))
        await board.success(second)
        return during, state(second), still, state(await board.acquire(tag, MODEL))

    assert run(scenario, clock) == ("refused", "probe", "refused", "clean")


def test_team_and_platform_scopes_never_judge_each_other(backend, clock, tag):
    async def scenario(board):
        await fail(board, tag, 3)
        return (
            state(await board.acquire(tag, MODEL)),
            state(await board.acquire(f"{tag}#group:7", MODEL)),
            state(await board.acquire(tag, "other-model")),
        )

    assert run(scenario, clock) == ("refused", "clean", "clean")


def test_replicas_share_one_breaker_through_redis(redis_only, clock, tag):
    async def scenario():
        async with shared_state() as one, shared_state() as two:
            a, b = BreakerBoard(one, clock=clock), BreakerBoard(two, clock=clock)
            await fail(a, tag, 2)
            await fail(b, tag, 1)  # the third consecutive failure, seen by another replica
            refused = state(await a.acquire(tag, MODEL))
            clock.at(30.0)
            return refused, state(await b.acquire(tag, MODEL)), state(await a.acquire(tag, MODEL))

    assert asyncio.run(scenario()) == ("refused", "probe", "refused")


def test_with_redis_down_a_replica_judges_its_breakers_alone(redis_only, clock, tag):
    async def scenario():
        async with shared_state() as shared:
            board = BreakerBoard(shared, clock=clock)
            await fail(board, tag, 3)  # open in Redis
            cut(shared)
            alone = state(await board.acquire(tag, MODEL))  # this process saw no failure
            await fail(board, tag, 3)
            return alone, state(await board.acquire(tag, MODEL))

    assert asyncio.run(scenario()) == ("clean", "refused")


def test_a_peek_at_a_closed_clean_breaker_grants_a_clean_ticket_and_nothing_else_does(
    redis_only, clock, tag
):
    async def scenario():
        async with shared_state() as shared:
            board = BreakerBoard(shared, clock=clock)

            async def peek(scope):
                key, fields = board.peek(scope, MODEL)  # what the admission's script reads
                peeked = await shared.client.hmget(key, *fields)
                return board.ticket_from_peek(scope, MODEL, peeked)

            never_used = await peek(tag)
            await fail(board, f"{tag}-failing", 1)
            counted = await peek(f"{tag}-failing")
            await fail(board, f"{tag}-open", 3)
            opened = await peek(f"{tag}-open")
            unread = board.ticket_from_peek(tag, MODEL, None)  # Redis did not answer
            return never_used, counted, opened, unread

    never_used, counted, opened, unread = asyncio.run(scenario())

    assert (never_used.clean, never_used.probe) == (True, False)
    assert (counted, opened, unread) == (None, None, None)
