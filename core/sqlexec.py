"""The database drivers that run programs (the money steps of billing/ledger/, the gateway's
idempotency claims) in one transaction each, and the request path's database.

- `run_sync`: Django's connection (any database; the control plane, the reaper, SQLite).
- `run_here`: the same, inside the caller's transaction (settlement, in the usage writer's).
- `AsyncPgDriver`: asyncpg on the event loop with a small pool per process, so the request
  path spends no thread hop and no ORM machinery on money (PostgreSQL only). asyncpg, not
  async psycopg: measured, a statement costs the request path about a quarter less CPU
  (its connections stay registered with the loop, and its protocol is compiled), and every
  statement is prepared once per connection.

The programs are written with psycopg's placeholders (`%s`, `%(name)s`), which Django's
connection takes; the async driver rewrites each statement once to asyncpg's `$n`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Generator
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


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Skip asyncpg's reset of a connection going back to the pool (a round trip per
    statement): these statements leave no session state (no SET, LISTEN or advisory lock),
    and a transaction is always closed by its own block."""


# The runtime awaits `Database.open()` before it serves, so a statement never finds no pool.
_NOT_OPEN = "AsyncPgDriver used before open()"


class _Connection:
    """A pooled connection for one program or statement. One the server cut (its notice
    read first: InternalClientError) is closed rather than given back: asyncpg would hand it
    out again, and it can take no statement (its socket may stay open a while)."""

    __slots__ = ("_acquiring", "_conn")

    def __init__(self, pool: asyncpg.Pool | None, wait_s: float | None) -> None:
        assert pool is not None, _NOT_OPEN
        self._acquiring = pool.acquire(timeout=wait_s)

    async def __aenter__(self) -> asyncpg.Connection:
        self._conn = await self._acquiring.__aenter__()
        return self._conn

    async def __aexit__(self, kind, error, trace) -> None:
        if kind is not None and issubclass(kind, asyncpg.InternalClientError):
            self._conn.terminate()
        await self._acquiring.__aexit__(kind, error, trace)


class AsyncPgDriver:
    def __init__(self, params: dict, *, max_size: int = 4) -> None:
        self._params = params
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        # No connection at start: a database down at boot is an outage to refuse through
        # (LM-5004), not a reason not to start; the pool connects on first use.
        self._pool = asyncpg.create_pool(
            **self._params, min_size=0, max_size=self._max_size, timeout=10, reset=_keep_session
        )
        await self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    async def run(self, program: Program[R], *, wait_s: float | None = None) -> R:
        """Run a program in one transaction (`wait_s`: longest wait for a connection)."""
        async with _Connection(self._pool, wait_s) as conn, conn.transaction():
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
        async with _Connection(self._pool, wait_s) as conn:
            row = await conn.fetchrow(converted, *args)
        return None if row is None else tuple(row)

    async def all_rows(self, sql: str, params: dict, *, wait_s: float | None = None) -> list[Row]:
        """Run one self-contained statement; return all its rows."""
        converted, args = _bound(sql, params)
        async with _Connection(self._pool, wait_s) as conn:
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
