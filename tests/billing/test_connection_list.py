"""The request path's database connections (core/sqlexec.py's ConnectionList) on a real
PostgreSQL: never more open than allowed, a wait that ends frees what it was handed, a
refused program's connection serves the next, and one left mid-statement or idle too long is
closed."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from core.sqlexec import IDLE_LIFETIME_S, AsyncPgDriver, ConnectionList, postgres_params
from tests.support.services import requires_postgres

pytestmark = [requires_postgres, pytest.mark.timeout(60), pytest.mark.django_db]

PID = "SELECT pg_backend_pid()"


def params() -> dict:
    found = postgres_params()
    assert found is not None
    return found


async def opened(max_size: int) -> AsyncPgDriver:
    driver = AsyncPgDriver(params(), max_size=max_size)
    await driver.open()
    return driver


def connections(driver: AsyncPgDriver) -> ConnectionList:
    assert driver._connections is not None  # opened
    return driver._connections


async def pid(driver: AsyncPgDriver, *, wait_s: float | None = None) -> int:
    row = await driver.one_statement(PID, {}, wait_s=wait_s)
    assert row is not None
    return row[0]


class Refused(Exception):
    """A program's own refusal (as billing's are): raised inside its transaction."""


def test_twenty_callers_share_at_most_max_size_connections():
    async def scenario() -> tuple[list[int], int]:
        driver = await opened(max_size=3)
        try:
            rows = await asyncio.gather(
                *(
                    driver.one_statement("SELECT pg_backend_pid(), pg_sleep(0.02)", {})
                    for _ in range(20)
                )
            )
            return [row[0] for row in rows if row], connections(driver).idle
        finally:
            await driver.close()

    pids, idle = asyncio.run(scenario())

    assert len(pids) == 20
    assert len(set(pids)) == 3  # each caller served; never a fourth connection
    assert idle == 3  # all put back


def test_a_caller_waits_no_longer_than_its_wait_and_leaves_no_slot_taken():
    async def scenario() -> tuple[type, int, int]:
        driver = await opened(max_size=1)
        try:
            first = await pid(driver)
            busy = asyncio.ensure_future(driver.one_statement("SELECT pg_sleep(0.3)", {}))
            await asyncio.sleep(0.05)
            try:
                await pid(driver, wait_s=0.05)
                outcome: type = type(None)
            except TimeoutError as exc:
                outcome = type(exc)
            await busy
            return outcome, first, await pid(driver, wait_s=1)
        finally:
            await driver.close()

    outcome, first, after = asyncio.run(scenario())

    assert outcome is TimeoutError
    assert after == first  # the one connection, given back and taken again


def test_a_connection_handed_to_a_waiter_cancelled_at_that_moment_goes_to_the_next():
    async def scenario() -> tuple[bool, int, int]:
        connections = ConnectionList(params(), max_size=1)
        try:
            conn = await connections.take(None)
            held = await conn.fetchval(PID)
            cancelled = asyncio.ensure_future(connections.take(None))
            await asyncio.sleep(0)  # it waits
            connections.put_back(conn, reusable=True)  # handed to it...
            cancelled.cancel()  # ...and cancelled before it resumes
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            again = await asyncio.wait_for(connections.take(None), 2)
            taken = await again.fetchval(PID)
            connections.put_back(again, reusable=True)
            return cancelled.cancelled(), held, taken
        finally:
            await connections.close()

    was_cancelled, held, taken = asyncio.run(scenario())

    assert was_cancelled
    assert taken == held  # not lost with the cancelled waiter


def test_a_refused_program_rolls_back_and_its_connection_serves_the_next():
    def program():
        yield ("SELECT pg_backend_pid()", ())
        yield ("CREATE TEMP TABLE refused_here (x int)", ())
        raise Refused

    async def scenario() -> tuple[int, int, bool]:
        driver = await opened(max_size=1)
        try:
            before = await pid(driver)
            with pytest.raises(Refused):
                await driver.run(program())
            after = await pid(driver)
            # The refused transaction's table is gone: it was rolled back, not left open.
            row = await driver.one_statement(
                "SELECT to_regclass('pg_temp.refused_here') IS NULL", {}
            )
            return before, after, bool(row and row[0])
        finally:
            await driver.close()

    before, after, rolled_back = asyncio.run(scenario())

    assert after == before
    assert rolled_back


def test_a_server_error_keeps_the_connection_and_a_cancelled_statement_closes_it():
    async def scenario() -> tuple[int, int, int, int]:
        driver = await opened(max_size=1)
        try:
            first = await pid(driver)
            with pytest.raises(asyncpg.PostgresError):
                await driver.one_statement("SELECT 1 / 0", {})
            after_error = await pid(driver)
            mid_statement = asyncio.ensure_future(driver.one_statement("SELECT pg_sleep(5)", {}))
            await asyncio.sleep(0.1)
            mid_statement.cancel()
            with pytest.raises(asyncio.CancelledError):
                await mid_statement
            after_cancel = await pid(driver, wait_s=1)
            return first, after_error, after_cancel, connections(driver).idle
        finally:
            await driver.close()

    first, after_error, after_cancel, idle = asyncio.run(scenario())

    assert after_error == first  # the server answered: the connection is fine
    assert after_cancel != first  # it may still be running the statement: a new one
    assert idle == 1


def test_a_refused_connection_frees_its_slot():
    async def scenario() -> list[type]:
        driver = AsyncPgDriver({**params(), "host": "127.0.0.1", "port": 1}, max_size=1)
        await driver.open()
        raised = []
        for _ in range(2):  # the second would wait for ever if the first kept its slot
            try:
                await pid(driver, wait_s=1)
            except OSError as exc:
                raised.append(type(exc))
        await driver.close()
        return raised

    assert asyncio.run(scenario()) == [ConnectionRefusedError, ConnectionRefusedError]


def test_after_close_every_connection_is_closed_and_a_caller_is_refused():
    async def scenario() -> tuple[bool, type]:
        driver = await opened(max_size=2)
        conn = await connections(driver).take(None)
        await pid(driver)  # the second connection, left idle
        await driver.close()
        connections(driver).put_back(conn, reusable=True)  # a program ending after close
        try:
            await pid(driver)
            refused: type = type(None)
        except asyncpg.InterfaceError as exc:
            refused = type(exc)
        return conn.is_closed(), refused

    closed, refused = asyncio.run(scenario())

    assert closed
    assert refused is asyncpg.InterfaceError


def test_a_connection_idle_past_its_lifetime_is_closed_not_used():
    now = [1000.0]

    async def scenario() -> tuple[int, int, int, bool]:
        connections = ConnectionList(params(), max_size=1, clock=lambda: now[0])
        try:
            conn = await connections.take(None)
            first = await conn.fetchval(PID)
            connections.put_back(conn, reusable=True)
            now[0] += IDLE_LIFETIME_S - 1
            kept = await connections.take(None)
            second = await kept.fetchval(PID)
            connections.put_back(kept, reusable=True)
            now[0] += IDLE_LIFETIME_S
            fresh = await connections.take(None)
            third = await fresh.fetchval(PID)
            connections.put_back(fresh, reusable=True)
            return first, second, third, conn.is_closed()
        finally:
            await connections.close()

    first, second, third, old_closed = asyncio.run(scenario())

    assert second == first  # idle 299 s: used again
    assert third != first  # idle 300 s: a new connection...
    assert old_closed  # ...and the old one closed, its slot reused (max_size=1)
