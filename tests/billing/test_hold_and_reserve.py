"""The budget hold and the first reservation in one statement (billing.escrow), against real
PostgreSQL: what happens when something else holds the wallet, and when the request leaves
while the statement is in flight."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import psycopg
import pytest
from django.db import connection

from accounts.models import Group
from billing.escrow import Escrow
from billing.ledger.fused import FirstReservation
from billing.ledger.holds import Hold
from billing.models import Reservation, SpendHold, Wallet
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

pytestmark = [requires_postgres, pytest.mark.timeout(60)]

HOLD = 500
ESCROW = 300


def session_params() -> dict:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return params


def session() -> psycopg.Connection:
    return psycopg.connect(**session_params())


def lock_wallet(account_id: int) -> psycopg.Connection:
    """Hold the wallet's row lock from another session until the returned one commits."""
    other = session()
    other.execute("SELECT id FROM billing_wallet WHERE account_id = %s FOR UPDATE", (account_id,))
    return other


@contextlib.asynccontextmanager
async def escrow_and_locked_wallet(account_id: int):
    """A request path's escrow, and a session holding the wallet's row lock until it commits."""
    escrow = Escrow()
    await escrow.open()
    other = lock_wallet(account_id)
    try:
        yield escrow, other
    finally:
        other.close()
        await escrow.close()


async def waiting_on_a_lock(statement_start: str) -> None:
    """Return once a statement starting so waits for a row lock (another session's)."""
    # Its own session, autocommit: pg_stat_activity is a snapshot per transaction.
    with psycopg.connect(**{**session_params(), "autocommit": True}) as watcher:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database() AND query LIKE %s",
                (statement_start + "%",),
            ).fetchone()
            assert row is not None  # count(*): one row
            if row[0]:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"no statement {statement_start!r} waited on the lock")


def request(tenant) -> tuple[Hold, FirstReservation]:
    hold = Hold(
        request_id=uuid.uuid4().hex,
        group_id=tenant.group_id,
        api_key_id=tenant.api_key_id,
        key_budgeted=False,
        amount_micro=HOLD,
    )
    return hold, FirstReservation(tenant.account_id, tenant.api_key_id, ESCROW)


def test_a_request_that_left_while_its_statement_was_in_flight_has_its_reservation_cancelled(
    transactional_db,
):
    tenant = make_tenant(wallet_micro=10_000, budget_micro=1_000_000)
    hold, first = request(tenant)

    async def scenario():
        async with escrow_and_locked_wallet(tenant.account_id) as (escrow, other):
            waiter = asyncio.ensure_future(escrow.hold_budget(hold, first=first))
            await waiting_on_a_lock("WITH wallet AS")
            waiter.cancel()  # the client left; its statement is already with the database
            other.commit()  # the statement goes through: hold and reservation taken
            with pytest.raises(asyncio.CancelledError):
                await waiter
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                row = other.execute(
                    "SELECT status FROM billing_reservation WHERE request_id = %s",
                    (hold.request_id,),
                ).fetchone()
                other.commit()
                if row and row[0] == "cancelled":
                    break
                await asyncio.sleep(0.01)

    asyncio.run(scenario())

    [reservation] = Reservation.objects.filter(request_id=hold.request_id)
    assert (reservation.status, reservation.amount_micro) == ("cancelled", ESCROW)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (10_000, 0)
    # The hold stays until the request's usage row releases it, as any hold of a request gone.
    [held] = SpendHold.objects.filter(request_id=hold.request_id)
    assert (held.status, held.amount_micro) == ("held", HOLD)
    assert Group.objects.get(pk=tenant.group_id).reserved_micro == HOLD


def test_behind_a_reservation_in_flight_on_its_wallet_a_hold_goes_alone(transactional_db):
    tenant = make_tenant(wallet_micro=10_000, budget_micro=1_000_000)
    earlier, _ = request(tenant)
    hold, first = request(tenant)

    async def scenario():
        async with escrow_and_locked_wallet(tenant.account_id) as (escrow, other):
            reserving = asyncio.ensure_future(
                escrow.reserve(
                    account_id=tenant.account_id,
                    request_id=earlier.request_id,
                    group_id=tenant.group_id,
                    api_key_id=tenant.api_key_id,
                    attempt_no=1,
                    amount_micro=ESCROW,
                )
            )
            await waiting_on_a_lock("WITH wallet AS")
            # The wallet is busy: the hold does not wait behind it for a reservation.
            taken = await asyncio.wait_for(escrow.hold_budget(hold, first=first), timeout=5)
            other.commit()
            return taken, await reserving

    taken, earlier_reservation = asyncio.run(scenario())

    assert taken is None  # the orchestrator reserves for it when it gets there
    assert SpendHold.objects.get(request_id=hold.request_id).amount_micro == HOLD
    assert not Reservation.objects.filter(request_id=hold.request_id).exists()
    assert Reservation.objects.get(pk=earlier_reservation).request_id == earlier.request_id
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert wallet.reserved_micro == ESCROW
