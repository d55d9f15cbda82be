"""The request path's async face of money: budget holds and wallet escrow.

Each step is one short transaction of a billing/ledger.py program: on PostgreSQL run by
asyncpg on the event loop, elsewhere (embedded SQLite) in the database thread. A
database failure while taking a hold or a reservation becomes LM-5004 (refuse rather than
serve unbilled); only the crash mark of an already-covered call is skipped and counted
instead (see `mark_sent`). Settlement is not here: it rides on the usage row
(billing/settlement.py).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from billing import ledger
from billing.sqlexec import ASYNC_DB_ERRORS, AsyncPgDriver, postgres_params, run_sync
from core import errors, metrics
from core.db import off_loop

log = logging.getLogger(__name__)
DB_ERRORS = (DatabaseError, *ASYNC_DB_ERRORS)
# A crash mark is worth a short wait, not an outage's: after a failure, skip marks a while.
MARK_WAIT_S = 1.0
MARKS_OFF_S = 5.0


class Escrow:
    def __init__(self) -> None:
        self.ttl_s = settings.TOLLGATE["RESERVATION_TTL_S"]
        self._unmarked_warned_at = -3600.0
        self._marks_off_until = 0.0
        params = postgres_params()
        self._pg = AsyncPgDriver(params) if params else None

    async def open(self) -> None:
        if self._pg is not None:
            await self._pg.open()

    async def close(self) -> None:
        if self._pg is not None:
            await self._pg.close()

    async def run(self, program: ledger.Program, *, wait_s: float | None = None):
        if self._pg is not None:
            return await self._pg.run(program, wait_s=wait_s)
        return await off_loop(run_sync)(program)

    async def hold_budget(self, hold: ledger.Hold) -> None:
        """Take the budget hold on group, key and end caller, or refuse with LM-4001.

        On PostgreSQL a hold only the group's budget bounds is one statement (one round trip).
        """
        now = timezone.now()
        try:
            if self._pg is not None and not hold.key_budgeted and hold.caller is None:
                row = await self._pg.one_statement(
                    ledger.HOLD_ONE_STATEMENT,
                    {
                        "request": hold.request_id,
                        "group": hold.group_id,
                        "amount": hold.amount_micro,
                        "now": now,
                        "expires": now + timedelta(seconds=self.ttl_s),
                    },
                )
                if row is None:
                    raise ledger.Refused("group budget")
            else:
                await self.run(ledger.take_hold(hold, now=now, ttl_s=self.ttl_s))
        except ledger.Refused as refused:
            raise errors.BudgetExhausted(f"Budget exhausted ({refused}).") from None
        except DB_ERRORS:
            raise errors.DependencyDown() from None

    async def reserve(
        self,
        *,
        account_id: int,
        request_id: str,
        group_id: int,
        api_key_id: int | None,
        attempt_no: int,
        amount_micro: int,
    ) -> int:
        """Hold a platform attempt's worst-case cost on the wallet, or raise LM-4002."""
        now = timezone.now()
        try:
            if self._pg is not None:
                row = await self._pg.one_statement(
                    ledger.RESERVE_ONE_STATEMENT,
                    {
                        "account": account_id,
                        "request": request_id,
                        "group": group_id,
                        "key": api_key_id,
                        "attempt": attempt_no,
                        "amount": amount_micro,
                        "now": now,
                        "expires": now + timedelta(seconds=self.ttl_s),
                    },
                )
                if row is None:
                    raise ledger.Refused("wallet")
                return row[0]
            return await self.run(
                ledger.reserve(
                    account_id=account_id,
                    request_id=request_id,
                    group_id=group_id,
                    api_key_id=api_key_id,
                    attempt_no=attempt_no,
                    amount_micro=amount_micro,
                    now=now,
                    ttl_s=self.ttl_s,
                )
            )
        except ledger.Refused:
            raise errors.WalletInsufficient() from None
        except DB_ERRORS:
            raise errors.DependencyDown() from None

    async def mark_sent(
        self, *, request_id: str, group_id: int, amount_micro: int, hold_taken: bool
    ) -> bool:
        """Record that a platform call is about to be sent, before it is; return whether the
        request now has a hold (marked).

        The request's hold is marked; a request without one (`hold_taken` false) takes a hold
        of its worst case now, marked (one statement on PostgreSQL). If the gateway dies
        before the usage row is stored, the reaper charges it instead of releasing it at 0.

        With the database unreachable the call is still made: its budget and wallet checks
        (if any) already passed, and its charge rides on the usage journal, which outlives
        the outage. Only a gateway dying during the outage could then lose it; each such
        call is counted (tollgate_unmarked_calls_total) so an operator can see the exposure.
        """
        if time.monotonic() < self._marks_off_until:  # the database just failed: fail fast
            metrics.UNMARKED_CALLS.inc()
            return hold_taken
        now = timezone.now()
        try:
            if hold_taken:
                await self.run(ledger.mark_hold_sent(request_id), wait_s=MARK_WAIT_S)
            elif self._pg is not None:
                await self._pg.one_statement(
                    ledger.SENT_HOLD_ONE_STATEMENT,
                    {
                        "request": request_id,
                        "group": group_id,
                        "amount": amount_micro,
                        "now": now,
                        "expires": now + timedelta(seconds=self.ttl_s),
                    },
                    wait_s=MARK_WAIT_S,
                )
            else:
                hold = ledger.Hold(
                    request_id=request_id,
                    group_id=group_id,
                    api_key_id=None,
                    key_budgeted=False,
                    amount_micro=amount_micro,
                )
                await self.run(ledger.take_hold(hold, now=now, ttl_s=self.ttl_s, call_sent=True))
        except DB_ERRORS:
            metrics.UNMARKED_CALLS.inc()
            self._marks_off_until = time.monotonic() + MARKS_OFF_S
            if time.monotonic() - self._unmarked_warned_at > 60:  # one line a minute, not a flood
                self._unmarked_warned_at = time.monotonic()
                log.warning("database unreachable: platform calls are served without crash marks")
            return hold_taken
        return True

    async def cancel(self, reservation_id: int) -> None:
        try:
            await self.run(ledger.cancel_reservation(reservation_id, now=timezone.now()))
        except DB_ERRORS:
            log.error("could not cancel reservation %s; the reaper will expire it", reservation_id)
