"""Redis for state that can be lost or rebuilt, with a per-process stand-in when it is not there.

Every Redis call is bounded by a short timeout: `SharedState.run` for the request path's
commands, `SharedState.call` for the rest (redis-py's client, for its convenience). When
Redis is unset (embedded runs) or failing, callers use their in-process fallback; a failure
flips the `degraded` flag, logs one line and sets a gauge, and the next successful call flips
it back, so recovery needs no restart.

The request path's commands (admission, finish, journal, breakers) travel on one connection
per process, pipelined: every request writes its commands and awaits its own replies, which
come back in order; writes made in the same event-loop turn leave in one system call. That
costs a fraction of a pooled client's round trip (no pool checkout, no per-command objects),
and Redis, single-threaded, serves one connection as fast as many.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import deque
from typing import NoReturn
from urllib.parse import unquote, urlsplit

import hiredis
import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import ResponseError

from core import metrics
from core.config import tollgate

log = logging.getLogger(__name__)
RETRY_AFTER_FAILURE_S = 1.0
FAILURES = (TimeoutError, OSError, aioredis.ConnectionError, aioredis.TimeoutError)


class Script:
    """A Lua script run by its SHA1; its text goes along only when Redis does not know it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    def command(self, keys: list, args: list) -> ScriptCall:
        return ScriptCall(self, ("EVALSHA", self.sha, len(keys), *keys, *args))


class ScriptCall(tuple):
    """An EVALSHA command that remembers its script, to resend as EVAL after NOSCRIPT."""

    script: Script

    def __new__(cls, script: Script, command: tuple) -> ScriptCall:
        call = super().__new__(cls, command)
        call.script = script
        return call

    def as_eval(self) -> tuple:
        return ("EVAL", self.script.text, *self[2:])


class _Wire(asyncio.Protocol):
    """One pipelined Redis connection: commands out in order, replies matched in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._reader = hiredis.Reader(replyError=ResponseError)
        self._waiting: deque[tuple[asyncio.Future, int, list]] = deque()
        self._out: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        failure = ConnectionError(f"Redis connection lost ({exc or 'closed'})")
        while self._waiting:
            future = self._waiting.popleft()[0]
            if not future.done():
                future.set_exception(failure)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        waiting = self._waiting
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError:  # not Redis speaking: fail the waiting calls
                if self._transport is not None:
                    self._transport.close()
                return
            if reply is False:
                return
            future, count, replies = waiting[0]
            replies.append(reply)
            if len(replies) == count:
                waiting.popleft()
                if not future.done():  # a caller that timed out has gone
                    future.set_result(replies)

    def send(self, commands: list[tuple] | tuple) -> asyncio.Future:
        """Queue commands; the future gets their replies (errors as ResponseError values)."""
        if self.closed:
            raise ConnectionError("Redis connection closed")
        future = self.loop.create_future()
        self._waiting.append((future, len(commands), []))
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.extend(hiredis.pack_command(command) for command in commands)
        return future

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.closed:
            return
        # create_connection() calls connection_made() before any send: never None here.
        assert self._transport is not None
        self._transport.write(b"".join(out))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


# What a process does while its Redis is down, as its log says it.
LIMITS_FALLBACK = "limits and breakers fall back to this process"


class SharedState:
    def __init__(self, *, fallback: str = LIMITS_FALLBACK, gauged: bool = True) -> None:
        # `fallback` says in the log what its users do without it; the limits' Redis is the
        # one the `tollgate_redis_degraded` gauge watches (another, the cache's, is not
        # `gauged`).
        self.fallback = fallback
        self.gauged = gauged
        self.client: aioredis.Redis | None = None
        self.timeout_s = tollgate().redis_timeout_ms / 1000
        self.degraded = False
        self._down_until = 0.0
        self._dropping: asyncio.Task | None = None
        self._wire: _Wire | None = None
        self._connecting: asyncio.Task | None = None
        self.url = settings.REDIS_URL
        if self.url:
            self.client = self.new_client()

    def use(self, url: str) -> None:
        """Point at another Redis from now on (tests cut it off so)."""
        self.url = url
        self.client = self.new_client()
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    def new_client(self) -> aioredis.Redis:
        # Every call is already bounded by `call`'s one timer, so the client sets no read
        # timeout of its own (it would arm a second timer per read). The pool may grow to
        # match a burst rather than make requests queue for a connection.
        pool = aioredis.ConnectionPool.from_url(
            self.url,
            max_connections=1024,
            socket_timeout=None,
            socket_connect_timeout=self.timeout_s,
        )
        return aioredis.Redis.from_pool(pool)

    @property
    def available(self) -> bool:
        """Say whether to try Redis now (not configured, or recently failed: use fallback)."""
        return self.client is not None and time.monotonic() >= self._down_until

    async def run(self, *commands: tuple) -> list:
        """Send commands in one round trip on the pipelined connection; return their replies.

        Within the timeout, or SharedStateDown. A command's error reply is raised (as
        redis-py's ResponseError), but a script Redis does not know is sent again with its text.
        """
        if not commands:
            return []
        try:
            wire = self._wire
            if wire is None or wire.closed or wire.loop is not asyncio.get_running_loop():
                wire = await self._connected()
            replies = await self._within_timeout(wire, commands)
            unknown = [
                (i, command)
                for i, (command, reply) in enumerate(zip(commands, replies, strict=True))
                if isinstance(command, ScriptCall)
                and isinstance(reply, ResponseError)
                and str(reply).startswith("NOSCRIPT")
            ]
            if unknown:  # a Redis that restarted (or never saw the script): teach it
                again = await self._within_timeout(
                    wire, [command.as_eval() for _, command in unknown]
                )
                for (i, _), reply in zip(unknown, again, strict=True):
                    replies[i] = reply
        except FAILURES as exc:
            self._failed(exc)
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        self._succeeded()
        return replies

    async def _within_timeout(self, wire: _Wire, commands) -> list:
        # One timer on the replies' future: what asyncio.timeout does, without its context
        # manager and task bookkeeping (twice per request).
        replies = wire.send(commands)
        timer = wire.loop.call_later(self.timeout_s, _expire, replies)
        try:
            return await replies
        finally:
            timer.cancel()

    async def _connected(self) -> _Wire:
        """The pipelined connection, (re)opened by one task however many callers wait."""
        if self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Wire:
        """Connect, authenticate and select the database, all within the one timeout."""
        url = urlsplit(self.url)
        loop = asyncio.get_running_loop()
        wire = _Wire(loop)
        hello: list[tuple] = []
        if url.password:
            user = [unquote(url.username)] if url.username else []
            hello.append(("AUTH", *user, unquote(url.password)))
        db = url.path.strip("/") if url.scheme != "unix" else ""
        if db and db != "0":
            hello.append(("SELECT", int(db)))
        try:
            async with asyncio.timeout(self.timeout_s):
                if url.scheme == "unix":
                    await loop.create_unix_connection(lambda: wire, url.path)
                else:
                    await loop.create_connection(
                        lambda: wire,
                        url.hostname or "localhost",
                        url.port or 6379,
                        ssl=True if url.scheme == "rediss" else None,
                    )
                replies = await wire.send(hello) if hello else []
            refused = [reply for reply in replies if isinstance(reply, ResponseError)]
            if refused:
                raise ConnectionError(f"Redis refused the connection setup: {refused[0]}")
        except BaseException:
            wire.close()  # a half-open connection is nobody's
            raise
        self._wire = wire
        return wire

    async def call(self, make_awaitable):
        """Run one redis-py operation within the timeout; raise SharedStateDown on any failure."""
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await make_awaitable(self.client)
        except FAILURES as exc:
            self._failed(exc)
        self._succeeded()
        return result

    def _failed(self, exc: BaseException) -> NoReturn:
        self._down_until = time.monotonic() + RETRY_AFTER_FAILURE_S
        timed_out = isinstance(exc, TimeoutError | aioredis.TimeoutError)
        if not timed_out:
            # A refused or reset connection: the pooled ones are as stale (a restart).
            # A timeout is often only this loop running late: keep the healthy pool.
            self._drop_idle_connections()
        if not self.degraded:
            self.degraded = True
            if self.gauged:
                metrics.REDIS_DEGRADED.set(1)
            log.warning(
                "Redis unavailable (%s): %s",
                "TimeoutError" if timed_out else "ConnectionError",
                self.fallback,
            )
        raise SharedStateDown() from None

    def _succeeded(self) -> None:
        if self.degraded:
            self.degraded = False
            self._down_until = 0.0  # a success (e.g. the usage flusher's) ends the wait too
            if self.gauged:
                metrics.REDIS_DEGRADED.set(0)
            if self.fallback == LIMITS_FALLBACK:
                log.warning("Redis is back: limits and breakers are shared again")
            else:
                log.warning("Redis is back (while it was down, %s)", self.fallback)

    def _drop_idle_connections(self) -> None:
        """Forget pooled connections in the background: after a Redis restart each would
        fail once more, flapping the degraded state back on for every stale connection."""
        if self._wire is not None:
            self._wire.close()
            self._wire = None
        client = self.client
        if client is None or (self._dropping is not None and not self._dropping.done()):
            return

        async def drop() -> None:
            try:
                async with asyncio.timeout(RETRY_AFTER_FAILURE_S):
                    await client.connection_pool.disconnect(inuse_connections=False)
            except Exception:
                pass

        self._dropping = asyncio.get_running_loop().create_task(drop())

    async def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        if self.client is not None:
            await self.client.aclose()


def _expire(replies: asyncio.Future) -> None:
    if not replies.done():
        replies.set_exception(TimeoutError("Redis did not answer in time"))


class SharedStateDown(Exception):
    pass
