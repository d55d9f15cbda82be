"""A database connection the server cut (a restart, pg_terminate_backend) whose notice the
request path read before its socket closed: the crash mark is skipped and counted, never a
500, and the cut connection is not handed out again."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from django.db import connection

from billing.escrow import Escrow
from core import metrics
from core.sqlexec import AsyncPgDriver, Database, postgres_params
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

pytestmark = [requires_postgres, pytest.mark.timeout(60)]


class HalfOpenRelay:
    """Relays to PostgreSQL on the test's own event loop; when the server closes a
    connection, what it sent last reaches the client but the client's socket stays open (the
    moment between a FATAL notice and the close, held still)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server_closed = asyncio.Event()
        self._held: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for writer in self._held:
            writer.close()
        self._server.close()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        server_r, server_w = await asyncio.open_connection(*self.target)
        self._held += [client_w, server_w]

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()

        to_server = asyncio.ensure_future(self._client_side(pump(client_r, server_w), server_w))
        await pump(server_r, client_w)
        self.server_closed.set()  # and the client's socket stays open
        await to_server

    @staticmethod
    async def _client_side(pumping, server_w: asyncio.StreamWriter) -> None:
        await pumping
        server_w.close()  # the client closed: so does its server connection


async def backend_pid(driver: AsyncPgDriver) -> int:
    row = await driver.one_statement("SELECT pg_backend_pid()", {})
    assert row is not None
    return row[0]


def terminate(pid: int) -> None:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_cut_connection_skips_the_crash_mark_and_is_not_used_again(transactional_db):
    tenant = make_tenant(wallet_micro=10_000, budget_micro=1_000_000)
    params = postgres_params()
    assert params is not None

    async def scenario() -> tuple[bool, float, bool, list]:
        relay = HalfOpenRelay(params["host"] or "127.0.0.1", params["port"] or 5432)
        port = await relay.start()
        db = Database()
        db.pg = AsyncPgDriver({**params, "host": "127.0.0.1", "port": port}, max_size=1)
        await db.open()
        escrow = Escrow(db)
        await escrow.open()
        try:
            cut_pid = await backend_pid(db.pg)
            await asyncio.to_thread(terminate, cut_pid)
            await relay.server_closed.wait()
            for _ in range(3):  # loop turns for the client to read the notice the relay sent
                await asyncio.sleep(0)
            unmarked_before = metrics.UNMARKED_CALLS._value.get()
            marked = await escrow.mark_sent(
                request_id="cut-connection-1",
                group_id=tenant.group_id,
                api_key_id=tenant.api_key_id,
                amount_micro=500,
                hold_taken=False,
            )
            unmarked = metrics.UNMARKED_CALLS._value.get() - unmarked_before
            next_pid = await backend_pid(db.pg)
            holds = await db.pg.all_rows(
                "SELECT status FROM billing_spendhold WHERE request_id = %(request)s",
                {"request": "cut-connection-1"},
            )
            return marked, unmarked, next_pid != cut_pid, holds
        finally:
            await relay.stop()  # first: a connection closing waits for its socket to close
            await escrow.close()
            # Bounded: a pool still holding a broken connection may never finish closing.
            await asyncio.wait_for(db.close(), 10)

    marked, unmarked, new_connection, holds = asyncio.run(scenario())

    assert (marked, unmarked) == (False, 1)  # served unmarked, and counted
    assert holds == []  # the mark was never written
    assert new_connection  # the pool's one connection was the cut one: it was replaced
