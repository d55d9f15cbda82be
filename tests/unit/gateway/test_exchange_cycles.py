"""A request's exchange is freed by its reference counts: watching for the client leaving
leaves no cycle behind. (It did: the cancelled watcher's CancelledError kept `watch`'s frame,
the frame the exchange, the exchange its watcher, and with it every request's whole object
graph waited for the cyclic collector.)"""

from __future__ import annotations

import asyncio
import gc

from gateway.asgi import Exchange


def scope() -> dict:
    return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


async def served_requests(count: int, *, leaves: bool) -> int:
    """Serve `count` exchanges that watch for a disconnect, with the cyclic collector off;
    return how many unreachable objects it then finds."""
    gc.collect()
    gc.disable()
    try:
        for _ in range(count):
            gone = asyncio.Event()  # uvicorn's receive waits on an event like this

            async def receive(gone: asyncio.Event = gone) -> dict:
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict) -> None:
                return None

            ex = Exchange(scope(), receive, send)
            ex.watch_disconnect(lambda: None)
            await asyncio.sleep(0)  # the watcher is waiting in receive()
            if leaves:
                gone.set()
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            ex.stop_watching()
            await asyncio.sleep(0)  # the cancellation is delivered
            await asyncio.sleep(0)
            del ex
        return gc.collect()
    finally:
        gc.enable()


def test_a_served_request_leaves_nothing_for_the_cyclic_collector():
    assert asyncio.run(served_requests(20, leaves=False)) == 0


def test_a_client_that_left_leaves_nothing_for_the_cyclic_collector():
    assert asyncio.run(served_requests(20, leaves=True)) == 0
