"""The config-change bus: control-plane writes tell every gateway replica what went stale.

A publish reaches this process's subscribers directly and, with Redis configured, every
other replica over a Redis channel. `publish(..., wait=True)` also waits until each replica
listening has applied the message (used where "live before the write returns" matters: a
team key added or removed). A subscriber applies a message when it returns, or, when it
returns an awaitable (work on the replica's event loop, such as reloading its pools), when
that completes: the replica acknowledges only then. Lost messages are covered by each
replica's periodic reload.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable

import orjson
import redis
from django.conf import settings
from redis.connection import parse_url

log = logging.getLogger(__name__)

CHANNEL = "tollgate:bus"
ACK_PREFIX = "tollgate:bus:ack:"
REPLICA_ID = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Topic(enum.StrEnum):
    API_KEY = "api_key"
    GROUP = "group"
    PROFILES = "profiles"
    POOL = "pool"
    CACHE_PURGE = "cache_purge"  # a tenant purged its cached answers (core/response_cache.py)


Subscriber = Callable[[dict], Awaitable | None]
_subscribers: dict[str, list[Subscriber]] = defaultdict(list)

# How long a replica gives its subscribers' work on one message before it stops waiting (and
# does not acknowledge: the publisher then logs the replica as silent).
APPLY_TIMEOUT_S = 5.0


def subscribe(topic: Topic, callback: Subscriber) -> None:
    """Call `callback(payload)` in this process whenever `topic` is published.

    Called on the replica's event loop for a message from another replica, and in the
    publishing thread for one published in this process. On the loop it may return an
    awaitable: the message counts as applied once that completes.
    """
    _subscribers[topic].append(callback)


def deliver(topic: str, payload: dict) -> list[Awaitable]:
    """Call the topic's subscribers; return the work they left to await."""
    pending = []
    for callback in _subscribers.get(topic, ()):
        try:
            work = callback(payload)
        except Exception:
            log.exception("bus subscriber failed on %s", topic)
            continue
        if work is not None:
            pending.append(work)
    return pending


async def _apply(topic: str, payload: dict) -> bool:
    """Deliver a remote message and await what its subscribers left; whether all of it
    completed in time."""
    pending = deliver(topic, payload)
    if not pending:
        return True
    try:
        async with asyncio.timeout(APPLY_TIMEOUT_S):
            await asyncio.gather(*pending)
    except Exception:
        log.exception("applying %s failed; the periodic reload will catch up", topic)
        return False
    return True


def _sync_redis(*, read_timeout_s: float = 2.0):
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=read_timeout_s, socket_connect_timeout=2
    )


def channel() -> str:
    """Name the channel after the Redis database: pub/sub ignores database numbers."""
    return f"{CHANNEL}:{parse_url(settings.REDIS_URL).get('db', 0)}"


def publish(topic: Topic, payload: dict, *, wait: bool = False, timeout_s: float = 5.0) -> int:
    """Publish a change; return how many remote replicas received it.

    With `wait`, block until every receiving replica acknowledged applying it, so the caller
    can promise the change is live fleet-wide (a replica silent for `timeout_s` is logged).
    """
    for work in deliver(topic, payload):
        # A subscriber returns work only on its own event loop: published from a coroutine
        # in this process, which cannot block on it; it completes in the background.
        asyncio.ensure_future(work)
    if not settings.REDIS_URL:
        return 0
    message_id = uuid.uuid4().hex
    message = orjson.dumps(
        {
            "topic": str(topic),
            "payload": payload,
            "id": message_id,
            "origin": REPLICA_ID,
            "ack": wait,
        }
    )
    client = _sync_redis(read_timeout_s=timeout_s + 2)
    try:
        receivers = client.publish(channel(), message)
        if wait and receivers:
            ack_key = ACK_PREFIX + message_id
            acked = 0
            while acked < receivers:
                if client.blpop([ack_key], timeout=timeout_s) is None:
                    # A replica silent this long is dead or stuck; its periodic reload still
                    # drops what changed. Say so loudly rather than fail the caller.
                    log.error("%d replica(s) did not confirm %s", receivers - acked, topic)
                    break
                acked += 1
            client.delete(ack_key)
        return receivers
    finally:
        client.close()


async def listen(redis_factory: Callable, on_reconnect: Callable[[], None]) -> None:
    """Apply remote messages forever; after each (re)connection, reload everything."""
    backoff_s = 0.5
    while True:
        client = redis_factory()
        try:
            pubsub = client.pubsub()
            await pubsub.subscribe(channel())
            on_reconnect()
            backoff_s = 0.5
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                data = orjson.loads(message["data"])
                applied = True
                if data.get("origin") != REPLICA_ID:
                    applied = await _apply(data["topic"], data["payload"])
                if data.get("ack") and applied:
                    await client.rpush(ACK_PREFIX + data["id"], REPLICA_ID)
                    await client.expire(ACK_PREFIX + data["id"], 30)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Redis down: keep serving from memory, retry quietly.
            if backoff_s == 0.5:  # once per outage, not once per retry
                log.warning("config bus disconnected (%s); retrying", type(exc).__name__)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 10)
        finally:
            try:
                await client.aclose()
            except Exception:
                pass
