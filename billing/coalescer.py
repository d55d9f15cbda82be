"""Coalesced statements: one in flight per hot row, what queues meanwhile goes in the next.

The escrow (billing/escrow.py) takes budget holds and wallet reservations through these, so a
burst of one tenant's requests costs a few statements on its group's and wallet's rows, not
one each.
"""

from __future__ import annotations

import asyncio


class Coalescer:
    """One statement in flight per hot row (a group's budget, an account's wallet); what
    queues meanwhile goes in the next one. Concurrent requests of one tenant then wait
    behind one statement per batch, not one each: a burst of N costs a few statements."""

    LIMIT = 500

    def __init__(self, run_batch, *, orphaned=None) -> None:
        # async (key, items) -> one result per item, in order (an exception: that item failed)
        self._run_batch = run_batch
        self._orphaned = orphaned  # called with a result whose waiter left after it was sent
        self._queues: dict = {}
        self._draining: set[asyncio.Task] = set()  # strong references to the running drains

    def busy(self, key) -> bool:
        """Say whether a statement for `key` is in flight or queued."""
        return key in self._queues

    async def submit(self, key, item):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = queue = []
            task = loop.create_task(self._drain(key, queue))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
        queue.append((item, future))
        try:
            return await future
        except asyncio.CancelledError:
            # Cancelled after its result was set but before it woke to take it: the result
            # has nobody to go to, as if the waiter had left before the batch came back.
            if future.done() and not future.cancelled() and future.exception() is None:
                self._orphan(future.result())
            raise

    def _orphan(self, result) -> None:
        if self._orphaned is not None and result is not None:
            self._orphaned(result)

    async def _drain(self, key, queue) -> None:
        batch: list = []
        try:
            while queue:
                batch = [(item, f) for item, f in queue[: self.LIMIT] if not f.done()]
                del queue[: self.LIMIT]  # a waiter cancelled before its batch left is dropped
                if not batch:
                    continue
                try:
                    results = await self._run_batch(key, [item for item, _ in batch])
                except Exception as exc:  # every waiter of the batch learns it
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    failed = isinstance(result, BaseException)
                    if not future.done():
                        if failed:
                            future.set_exception(result)
                        else:
                            future.set_result(result)
                    elif not failed:
                        self._orphan(result)
        except BaseException as exc:  # cancelled (shutdown): no waiter is left hanging
            for _, future in batch + queue:
                if not future.done():
                    future.set_exception(exc)
            raise
        finally:
            del self._queues[key]
