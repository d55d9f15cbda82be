"""The database drivers that run programs (the money steps of billing/ledger/, the gateway's
idempotency claims) in one transaction each, and the request path's database.

- `run_sync`: Django's connection (any database; the control plane, the reaper, SQLite).
- `run_here`: the same, inside the caller's transaction (settlement, in the usage writer's).
- `AsyncPgDriver`: asyncpg on the event loop with a few connections per process (a
  `ConnectionList`, not asyncpg's pool), so the request path spends no thread hop and no ORM
  machinery on money (PostgreSQL only). asyncpg, not async psycopg: measured, a statement
  costs the request path about a quarter less CPU (its connections stay registered with the
  loop, and its protocol is compiled), and every statement is prepared once per connection.

The programs are written with psycopg's placeholders (`%s`, `%(name)s`), which Django's
connection takes; the async driver rewrites each statement once to asyncpg's `$n`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Generator
from functools import lru_cache
from typing import Any, TypeVar

import asyncpg
from django.conf import settings
from django.db import connection, transaction

from core.db import off_loop

log = logging.getLogger(__name__)
# What a failing database raises through asyncpg (a refused, dropped or timed-out connection,
# an error reply): callers refuse (LM-5004) or skip, never serve unbilled. InternalClientError
# is a connection the server cut whose notice asyncpg read before the socket closed (a
# restart, pg_terminate_backend): its next statement finds it "in another operation".
ASYNC_DB_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)
# A program is a generator: it yields `(sql, params)` and receives the statement's first row
# (or None), or yields `(sql, params, ALL)` and receives every row; raising rolls it back.
# `Program[R]` returns R. What it receives depends on the statement (a row, None, or a list
# of rows), so it is typed Any: each program knows its own statement's columns.
Statement = tuple[str, Any] | tuple[str, Any, str]
Row = tuple[Any, ...]
R = TypeVar("R")
Program = Generator[Statement, Any, R]
ALL = "all"  # third element of a yielded statement: receive every row, not the first
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s")


def run_sync(program: Program[R]) -> R:
    """Run a program in a Django transaction; a Refused raised inside rolls it back."""
    with transaction.atomic():
        return run_here(program)


def run_here(program: Program[R]) -> R:
    """Run a program in the caller's transaction (it rolls back with it)."""
    with connection.cursor() as cursor:
        result: Any = None
        try:
            while True:
                step = program.send(result)
                cursor.execute(step[0], step[1])
                if len(step) > 2:
                    result = cursor.fetchall() if cursor.description else []
                else:
                    result = cursor.fetchone() if cursor.description else None
        except StopIteration as done:
            return done.value


def postgres_params() -> dict | None:
    """asyncpg's connection arguments for Django's database, or None when it is not PostgreSQL."""
    db: dict[str, Any] = settings.DATABASES["default"]
    if "postgresql" not in db["ENGINE"]:
        return None
    return {
        "database": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": int(db["PORT"]) if db.get("PORT") else None,
    }


@lru_cache(maxsize=512)
def dollar_sql(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """Rewrite psycopg placeholders to `$n`; return the names in order for `%(name)s`."""
    names: list[str] = []
    positional = 0

    def number(match: re.Match) -> str:
        nonlocal positional
        name = match.group(1)
        if name is None:
            positional += 1
            return f"${positional}"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    converted = _PLACEHOLDER.sub(number, sql)
    if names and positional:
        raise ValueError("a statement mixes %s and %(name)s placeholders")
    return converted, (tuple(names) if names else None)


def _bound(sql: str, params) -> tuple[str, tuple]:
    converted, names = dollar_sql(sql)
    if names is None:
        return converted, tuple(params)
    return converted, tuple(params[name] for name in names)


# A connection's first statement waits at most this long for PostgreSQL to accept it.
CONNECT_TIMEOUT_S = 10.0
# Shutting down, a connection's goodbye to the server waits no longer than this.
CLOSE_TIMEOUT_S = 2.0
# A connection idle this long is closed, not used (asyncpg's pool's default): a firewall or a
# proxy may have dropped it silently, and a statement on it would hang, not fail.
IDLE_LIFETIME_S = 300.0


class ConnectionList:
    """The process's asyncpg connections: idle ones newest first, at most `max_size` open,
    opened on first use (a database down at boot is an outage to refuse through, LM-5004).

    Why not asyncpg's Pool: it resets each connection it takes back, behind a task
    (`asyncio.shield`), a wait with a timer per take, and a timer per release (the idle
    lifetime); measured with bench/instructions.py, the request path's event loop ran 4-6 %
    fewer instructions per request without them. These statements leave no
    session state to reset (no SET, LISTEN or advisory lock, and a transaction is always
    closed by its own block). A connection is taken and put back with no await; one that may
    be mid-statement is closed instead, and one idle past IDLE_LIFETIME_S is closed when it
    would next be taken (an idle process keeps its few connections open meanwhile).
    """

    __slots__ = ("_params", "_max_size", "_clock", "_idle", "_open", "_waiters", "_closing")

    def __init__(
        self, params: dict, max_size: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._params = params
        self._max_size = max_size
        self._clock = clock
        self._idle: list[tuple[asyncpg.Connection, float]] = []  # and when each was put back
        self._open = 0  # connections open or being opened
        # Callers waiting for a connection: each gets one put back, or None for a free slot.
        self._waiters: deque[asyncio.Future] = deque()
        self._closing = False

    @property
    def idle(self) -> int:
        """How many connections are open and waiting for a program."""
        return len(self._idle)

    async def take(self, wait_s: float | None) -> asyncpg.Connection:
        """A connection for one program; wait at most `wait_s` for one when all are busy."""
        while True:
            if self._closing:
                raise asyncpg.InterfaceError("the connection list is closed")
            while self._idle:
                conn, since = self._idle.pop()
                if not conn.is_closed() and self._clock() - since < IDLE_LIFETIME_S:
                    return conn
                conn.terminate()  # closed by the server, or idle too long
                self._open -= 1
            if self._open < self._max_size:
                return await self._connect()
            conn = await self._wait(wait_s)
            if conn is not None:
                return conn

    def put_back(self, conn: asyncpg.Connection, *, reusable: bool) -> None:
        """Give a connection back: to the first waiter, else to the idle list; one that is
        not `reusable` (or closed, or inside a transaction) is closed and its slot freed."""
        if self._closing or not reusable or conn.is_closed() or conn.is_in_transaction():
            conn.terminate()
            self._open -= 1
            self._hand_over(None)
        else:
            self._hand_over(conn)

    async def close(self) -> None:
        self._closing = True
        idle, self._idle = self._idle, []
        self._open -= len(idle)
        await asyncio.gather(*(_close_gently(conn) for conn, _ in idle))
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # it sees the list closed

    async def _connect(self) -> asyncpg.Connection:
        self._open += 1
        try:
            return await asyncpg.connect(**self._params, timeout=CONNECT_TIMEOUT_S)
        except BaseException:
            self._open -= 1
            self._hand_over(None)  # a waiter may try its own connection
            raise

    async def _wait(self, wait_s: float | None) -> asyncpg.Connection | None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(wait_s):
                return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._hand_over(waiter.result())  # handed over as the wait ended: pass it on
            elif waiter in self._waiters:  # not skipped by a hand-over since it was cancelled
                self._waiters.remove(waiter)
            raise

    def _hand_over(self, conn: asyncpg.Connection | None) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        if conn is not None:
            self._idle.append((conn, self._clock()))


async def _close_gently(conn: asyncpg.Connection) -> None:
    """Say goodbye to the server (its log stays quiet), but never wait long for it: asyncpg
    drops the socket when the goodbye fails or times out."""
    with contextlib.suppress(*ASYNC_DB_ERRORS):
        await conn.close(timeout=CLOSE_TIMEOUT_S)


# The runtime awaits `Database.open()` before it serves, so a statement never finds no list.
_NOT_OPEN = "AsyncPgDriver used before open()"


class _Connection:
    """A connection for one program or statement, put back when it ends. One the server cut
    (its notice read first: InternalClientError) or one a timeout or cancellation left
    mid-statement is closed rather than given back: it can take no statement (a cut one's
    socket may stay open a while)."""

    __slots__ = ("_connections", "_wait_s", "_conn")

    def __init__(self, connections: ConnectionList | None, wait_s: float | None) -> None:
        assert connections is not None, _NOT_OPEN
        self._connections = connections
        self._wait_s = wait_s

    async def __aenter__(self) -> asyncpg.Connection:
        self._conn = await self._connections.take(self._wait_s)
        return self._conn

    async def __aexit__(self, kind, error, trace) -> None:
        self._connections.put_back(self._conn, reusable=_reusable_after(kind))


def _reusable_after(kind: type[BaseException] | None) -> bool:
    """Whether a connection whose program ended so can serve the next: yes after success, the
    server's own error reply, or the program's refusal (the transaction block rolled back); no
    after a timeout, a cancellation or a driver error, which may leave a statement running."""
    if kind is None or issubclass(kind, asyncpg.PostgresError):
        return True
    return issubclass(kind, Exception) and not issubclass(kind, ASYNC_DB_ERRORS)


class AsyncPgDriver:
    def __init__(self, params: dict, *, max_size: int = 4) -> None:
        self._params = params
        self._max_size = max_size
        self._connections: ConnectionList | None = None

    async def open(self) -> None:
        self._connections = ConnectionList(self._params, self._max_size)

    async def close(self) -> None:
        if self._connections is not None:
            await self._connections.close()

    async def run(self, program: Program[R], *, wait_s: float | None = None) -> R:
        """Run a program in one transaction (`wait_s`: longest wait for a connection)."""
        async with _Connection(self._connections, wait_s) as conn, conn.transaction():
            result: Any = None
            try:
                while True:
                    step = program.send(result)
                    sql, args = _bound(step[0], step[1])
                    # Every ledger statement RETURNs: there is always a result to fetch.
                    if len(step) > 2:
                        result = [tuple(row) for row in await conn.fetch(sql, *args)]
                    else:
                        row = await conn.fetchrow(sql, *args)
                        result = None if row is None else tuple(row)
            except StopIteration as done:
                return done.value

    async def one_statement(
        self, sql: str, params: dict, *, wait_s: float | None = None
    ) -> Row | None:
        """Run one self-contained statement (outside a transaction it is atomic on its own)."""
        converted, args = _bound(sql, params)
        async with _Connection(self._connections, wait_s) as conn:
            row = await conn.fetchrow(converted, *args)
        return None if row is None else tuple(row)

    async def all_rows(self, sql: str, params: dict, *, wait_s: float | None = None) -> list[Row]:
        """Run one self-contained statement; return all its rows."""
        converted, args = _bound(sql, params)
        async with _Connection(self._connections, wait_s) as conn:
            rows = await conn.fetch(converted, *args)
        return [tuple(row) for row in rows]


class Database:
    """The request path's database: asyncpg on the event loop on PostgreSQL; elsewhere
    (embedded SQLite) Django's connection in the database thread. Opened and closed with
    the gateway's runtime; everything on the request path that runs a program uses it."""

    def __init__(self) -> None:
        params = postgres_params()
        self.pg = AsyncPgDriver(params) if params else None

    async def open(self) -> None:
        if self.pg is not None:
            await self.pg.open()

    async def close(self) -> None:
        if self.pg is not None:
            await self.pg.close()

    async def run(self, program: Program[R], *, wait_s: float | None = None) -> R:
        """Run a program in one transaction (`wait_s`: longest wait for a connection)."""
        if self.pg is not None:
            return await self.pg.run(program, wait_s=wait_s)
        return await off_loop(run_sync)(program)
