"""Drivers that run billing/ledger.py programs in one transaction each.

- `run_sync`: Django's connection (any database; the control plane, the reaper, SQLite).
- `run_here`: the same, inside the caller's transaction (settlement, in the usage writer's).
- `AsyncPgDriver`: async psycopg on the event loop with a small pool per process, so the
  request path spends no thread hop and no ORM machinery on money (PostgreSQL only).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection, transaction
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from billing.ledger import Program

log = logging.getLogger(__name__)


def run_sync(program: Program):
    """Run a program in a Django transaction; a Refused raised inside rolls it back."""
    with transaction.atomic():
        return run_here(program)


def run_here(program: Program):
    """Run a program in the caller's transaction (it rolls back with it)."""
    with connection.cursor() as cursor:
        result = None
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


def postgres_conninfo() -> str | None:
    db = settings.DATABASES["default"]
    if "postgresql" not in db["ENGINE"]:
        return None
    return make_conninfo(
        dbname=db["NAME"],
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
    )


class AsyncPgDriver:
    def __init__(self, conninfo: str, *, max_size: int = 4) -> None:
        self._pool = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_size,
            open=False,
            timeout=10,
            # Autocommit: a lone statement commits itself; programs open their transaction.
            kwargs={"prepare_threshold": 0, "autocommit": True},
        )

    async def open(self) -> None:
        await self._pool.open()

    async def close(self) -> None:
        await self._pool.close()

    async def run(self, program: Program, *, wait_s: float | None = None):
        """Run a program in one transaction (`wait_s`: longest wait for a connection)."""
        async with (
            self._pool.connection(timeout=wait_s) as conn,
            conn.transaction(),
            conn.cursor() as cursor,
        ):
            result = None
            try:
                while True:
                    step = program.send(result)
                    await cursor.execute(step[0], step[1])
                    # Every ledger statement RETURNs: there is always a result to fetch.
                    if len(step) > 2:
                        result = await cursor.fetchall()
                    else:
                        result = await cursor.fetchone()
            except StopIteration as done:
                return done.value

    async def one_statement(
        self, sql: str, params: dict, *, wait_s: float | None = None
    ) -> tuple | None:
        """Run one self-contained statement in autocommit (it is atomic on its own)."""
        async with self._pool.connection(timeout=wait_s) as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchone()
