"""billing.coalescer.Coalescer: one statement in flight per hot row, the rest in the next."""

from __future__ import annotations

import asyncio

from billing.coalescer import Coalescer


def test_what_queues_behind_a_batch_in_flight_goes_in_the_next_one():
    batches: list[list[int]] = []

    async def run_batch(key, items):
        batches.append(list(items))
        await asyncio.sleep(0.01)
        return [item * 10 for item in items]

    async def scenario():
        coalescer = Coalescer(run_batch)
        first = asyncio.ensure_future(coalescer.submit("group-1", 1))
        await asyncio.sleep(0.001)  # the first batch is in flight
        rest = [asyncio.ensure_future(coalescer.submit("group-1", n)) for n in (2, 3, 4)]
        other = await coalescer.submit("group-2", 5)  # another row: its own statement
        return await first, await asyncio.gather(*rest), other

    assert asyncio.run(scenario()) == (10, [20, 30, 40], 50)
    assert sorted(batches) == [[1], [2, 3, 4], [5]]


def test_a_waiter_gone_before_its_batch_is_dropped_and_after_it_its_result_is_orphaned():
    batches: list[list[int]] = []
    orphans: list[int] = []

    async def run_batch(key, items):
        batches.append(list(items))
        await asyncio.sleep(0.02)
        return [item * 10 for item in items]

    async def scenario():
        coalescer = Coalescer(run_batch, orphaned=orphans.append)
        sent = asyncio.ensure_future(coalescer.submit("g", 1))
        await asyncio.sleep(0.005)  # batch [1] is in flight
        queued = asyncio.ensure_future(coalescer.submit("g", 2))
        kept = asyncio.ensure_future(coalescer.submit("g", 3))
        await asyncio.sleep(0)
        sent.cancel()  # after its statement left: its result has nobody to go to
        queued.cancel()  # before its statement left: never sent
        return await kept

    assert asyncio.run(scenario()) == 30
    assert batches == [[1], [3]]
    assert orphans == [10]


def test_a_waiter_cancelled_after_its_result_came_but_before_it_woke_orphans_the_result():
    orphans: list[int] = []
    waiters: list[asyncio.Future] = []

    async def run_batch(key, items):
        await asyncio.sleep(0)
        # Runs after the result is set and before the waiter wakes to take it.
        asyncio.get_running_loop().call_soon(waiters[0].cancel)
        return [item * 10 for item in items]

    async def scenario():
        coalescer = Coalescer(run_batch, orphaned=orphans.append)
        waiters.append(asyncio.ensure_future(coalescer.submit("g", 1)))
        try:
            await waiters[0]
        except asyncio.CancelledError:
            return "cancelled"
        return "took its result"

    assert asyncio.run(scenario()) == "cancelled"
    assert orphans == [10]


def test_an_item_that_failed_raises_for_its_waiter_only():
    async def run_batch(key, items):
        await asyncio.sleep(0)
        return [ValueError("down") if item == 2 else item * 10 for item in items]

    async def scenario():
        coalescer = Coalescer(run_batch)
        outcomes = await asyncio.gather(
            *(coalescer.submit("g", n) for n in (1, 2, 3)), return_exceptions=True
        )
        return [o if isinstance(o, int) else type(o).__name__ for o in outcomes]

    assert asyncio.run(scenario()) == [10, "ValueError", 30]
