"""The request path's async face of money: budget holds and wallet escrow.

Each step is one short transaction of a billing/ledger/ program: on PostgreSQL run by
asyncpg on the event loop, elsewhere (embedded SQLite) in the database thread. A
database failure while taking a hold or a reservation becomes LM-5004 (refuse rather than
serve unbilled); only the crash mark of an already-covered call is skipped and counted
instead (see `mark_sent`). Settlement is not here: it rides on the usage row
(billing/settlement.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

from billing import tag_ledger
from billing.coalescer import Coalescer
from billing.ledger.fused import (
    HOLD_AND_RESERVE_STATEMENT,
    HOLD_MANY_STATEMENT,
    HOLD_ONE_STATEMENT,
    RESERVE_MANY_STATEMENT,
    RESERVE_ONE_STATEMENT,
    SENT_HOLD_ONE_STATEMENT,
    FirstReservation,
)
from billing.ledger.holds import BUDGET_RESET_READS, Hold, mark_hold_sent, take_hold
from billing.ledger.sql import Refused
from billing.ledger.wallet import WALLET_AVAILABLE_READ, cancel_reservation
from billing.ledger.wallet import reserve as ledger_reserve
from billing.request_money import RequestMoney
from core import errors, metrics
from core.config import tollgate
from core.db import off_loop
from core.sqlexec import ASYNC_DB_ERRORS, Database, Program, R

log = logging.getLogger(__name__)
DB_ERRORS = (DatabaseError, *ASYNC_DB_ERRORS)
# A crash mark is worth a short wait, not an outage's: after a failure, skip marks a while.
MARK_WAIT_S = 1.0
MARKS_OFF_S = 5.0


@dataclass(frozen=True, slots=True)
class HoldTaken:
    """A budget hold taken, with the first call's reservation when it was taken along."""

    reservation_id: int | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A step the books refused: which budget said no."""

    budget: str


GROUP_REFUSED = Refusal("group budget")
# The coalesced statements (`Escrow._hold_batch`, `_reserve_batch` and theirs) run only on
# PostgreSQL: `hold_budget` and `reserve` submit to the coalescers only when `_pg` is set.
PG_ONLY = "a PostgreSQL-only escrow path ran without PostgreSQL"


async def _one_by_one(items: list, statement, result) -> list:
    """Each item's own statement, for its own verdict. Once the database fails, that item
    and the rest get the failure, and the ones before keep what they took (each waiter
    learns exactly what happened to its own)."""
    results: list = []
    for item in items:
        try:
            row = await statement(item)
        except DB_ERRORS as exc:
            return results + [exc] * (len(items) - len(results))
        results.append(result(row))
    return results


class Escrow:
    def __init__(self, db: Database | None = None) -> None:
        # The request path's database (gateway/runtime.py shares one); without one, its own.
        self.db = db or Database()
        self._owns_db = db is None
        self._pg = self.db.pg
        self.ttl_s = tollgate().reservation_ttl_s
        self._unmarked_warned_at = -3600.0
        self._marks_off_until = 0.0
        # A hold whose request left meanwhile is released with the request's usage row; a
        # reservation it never saw (alone, or taken with its hold) would stay pending, marked
        # sent, and be charged by the reaper: it is cancelled instead (its call was never
        # made).
        self._holds = Coalescer(self._hold_batch, orphaned=self._cancel_reserved_ahead)
        self._reservations = Coalescer(self._reserve_batch, orphaned=self._cancel_later)
        self._cancelling: set[asyncio.Task] = set()
        self._reserving_ahead: set[int] = set()  # wallets a hold-and-reserve statement is on

    async def _hold_batch(self, group_id: int, items: list) -> list[HoldTaken | Refusal]:
        now = timezone.now()
        expires = now + timedelta(seconds=self.ttl_s)
        holds = [hold for hold, _ in items]
        if len(items) == 1 and items[0][1] is not None:
            return [await self._hold_and_reserve(*items[0], now=now, expires=expires)]
        if len(holds) > 1:
            pg = self._pg
            assert pg is not None, PG_ONLY
            rows = await pg.all_rows(
                HOLD_MANY_STATEMENT,
                {
                    "requests": [h.request_id for h in holds],
                    "amounts": [h.amount_micro for h in holds],
                    "keys": [h.api_key_id for h in holds],
                    "group": group_id,
                    "now": now,
                    "expires": expires,
                },
            )
            if rows:
                return [HoldTaken()] * len(holds)
        return await _one_by_one(
            holds,
            lambda h: self._hold_one(h, now=now, expires=expires),
            lambda row: HoldTaken() if row is not None else GROUP_REFUSED,
        )

    async def _hold_one(self, hold: Hold, *, now, expires) -> tuple | None:
        pg = self._pg
        assert pg is not None, PG_ONLY
        return await pg.one_statement(
            HOLD_ONE_STATEMENT,
            {
                "amount": hold.amount_micro,
                "group": hold.group_id,
                "key": hold.api_key_id,
                "request": hold.request_id,
                "now": now,
                "expires": expires,
            },
        )

    async def _hold_and_reserve(
        self, hold: Hold, first: FirstReservation, *, now, expires
    ) -> HoldTaken | Refusal:
        """The hold and the first reservation in one statement (ledger's
        `hold_and_reserve_statement`). When it takes nothing, the hold alone is asked for: a
        group that refuses says so, and a wallet that refused leaves the hold alone (the
        orchestrator then asks for the reservation, and is told, itself). A group that
        filled up meanwhile leaves a reservation with no call sent, given back at once."""
        pg = self._pg
        assert pg is not None, PG_ONLY
        row = await pg.one_statement(
            HOLD_AND_RESERVE_STATEMENT,
            {
                "amount": hold.amount_micro,
                "escrow": first.amount_micro,
                "account": first.account_id,
                "group": hold.group_id,
                # The request's key (the hold's and the reservation's: one request, one key).
                "key": first.api_key_id,
                "request": hold.request_id,
                "now": now,
                "expires": expires,
            },
        )
        if row is None:
            taken = await self._hold_one(hold, now=now, expires=expires) is not None
            return HoldTaken() if taken else GROUP_REFUSED
        reservation_id, held = row
        if held:
            return HoldTaken(reservation_id)
        await self.cancel(reservation_id)
        return GROUP_REFUSED

    async def _reserve_batch(self, account_id: int, items: list) -> list:
        now = timezone.now()
        expires = now + timedelta(seconds=self.ttl_s)
        pg = self._pg
        assert pg is not None, PG_ONLY
        if len(items) > 1:
            rows = await pg.all_rows(
                RESERVE_MANY_STATEMENT,
                {
                    "requests": [i["request"] for i in items],
                    "groups": [i["group"] for i in items],
                    "keys": [i["key"] for i in items],
                    "attempts": [i["attempt"] for i in items],
                    "amounts": [i["amount"] for i in items],
                    "account": account_id,
                    "now": now,
                    "expires": expires,
                },
            )
            if rows:
                ids = {(r[1], r[2]): r[0] for r in rows}
                return [ids[(i["request"], i["attempt"])] for i in items]
        return await _one_by_one(
            items,
            lambda i: pg.one_statement(
                RESERVE_ONE_STATEMENT,
                {**i, "account": account_id, "now": now, "expires": expires},
            ),
            lambda row: row[0] if row is not None else None,
        )

    async def open(self) -> None:
        if self._owns_db:
            await self.db.open()

    async def close(self) -> None:
        if self._owns_db:
            await self.db.close()

    async def run(self, program: Program[R], *, wait_s: float | None = None) -> R:
        return await self.db.run(program, wait_s=wait_s)

    def open_request(
        self,
        *,
        request_id: str,
        account_id: int,
        group_id: int,
        api_key_id: int | None,
        estimate_micro: int,
    ) -> RequestMoney:
        """Open one request's money handle (billing/request_money.py)."""
        return RequestMoney(
            self,
            request_id=request_id,
            account_id=account_id,
            group_id=group_id,
            api_key_id=api_key_id,
            estimate_micro=estimate_micro,
        )

    async def hold_budget(self, hold: Hold, *, first: FirstReservation | None = None) -> int | None:
        """Take the budget hold on group, key and end caller, or refuse with LM-4001; return
        the id of `first` (the first platform attempt's wallet reservation) when it was taken
        along with the hold, else None (the orchestrator reserves it when it gets there).

        On PostgreSQL a hold only the group's budget bounds is one statement, shared with the
        group's other holds queued meanwhile (the Coalescer). When nothing else is in flight
        for its group and its wallet, `first` rides in that statement: one commit before the
        vendor call, not two. Behind other statements it is left to the orchestrator, so a
        busy wallet still takes its reservations in batches.
        """
        try:
            if self._pg is not None and not (hold.key_budgeted or hold.caller or hold.tags):
                if first is not None and not self._may_reserve_ahead(hold, first):
                    first = None
                if first is not None:
                    self._reserving_ahead.add(first.account_id)
                try:
                    taken = await self._holds.submit(hold.group_id, (hold, first))
                finally:
                    if first is not None:
                        self._reserving_ahead.discard(first.account_id)
                if isinstance(taken, Refusal):
                    raise Refused(taken.budget)
                return taken.reservation_id
            await self.run(take_hold(hold, now=timezone.now(), ttl_s=self.ttl_s))
            return None
        except Refused as refused:
            tagged = tag_ledger.refusal_message(hold.tags, str(refused), now=timezone.now())
            if tagged is not None:
                raise errors.BudgetExhausted(tagged) from None
            resets = await self._reset_note(hold, str(refused))
            raise errors.BudgetExhausted(f"Budget exhausted ({refused}){resets}.") from None
        except DB_ERRORS:
            raise errors.DependencyDown() from None

    def _may_reserve_ahead(self, hold: Hold, first: FirstReservation) -> bool:
        return not (
            self._holds.busy(hold.group_id)
            or self._reservations.busy(first.account_id)
            or first.account_id in self._reserving_ahead
        )

    async def _reset_note(self, hold: Hold, refused: str) -> str:
        """When the refusing budget has a period, say when it resets (a refusal's one read)."""
        sql = BUDGET_RESET_READS.get(refused)
        if sql is None:
            return ""
        row_id = hold.group_id if refused == "group budget" else hold.api_key_id
        try:
            row = await self._read(sql, {"id": row_id})
        except DB_ERRORS:
            return ""
        if row is None or row[1] is None:
            return ""
        return f"; this {row[0]} budget resets at {row[1].astimezone(UTC).isoformat()}"

    async def _read(self, sql: str, params: dict) -> tuple | None:
        """One read off the hot path (a refusal's explanation), with a short wait."""
        if self._pg is not None:
            return await self._pg.one_statement(sql, params, wait_s=MARK_WAIT_S)

        def read() -> tuple | None:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone()

        return await off_loop(read)()

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
                reservation_id = await self._reservations.submit(
                    account_id,
                    {
                        "request": request_id,
                        "group": group_id,
                        "key": api_key_id,
                        "attempt": attempt_no,
                        "amount": amount_micro,
                    },
                )
                if reservation_id is None:
                    raise Refused("wallet")
                return reservation_id
            return await self.run(
                ledger_reserve(
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
        except Refused:
            try:
                row = await self._read(WALLET_AVAILABLE_READ, {"account": account_id})
            except DB_ERRORS:
                row = None
            raise errors.WalletInsufficient.for_wallet(
                account_id=account_id,
                available_micro=row[0] if row is not None else None,
                needed_micro=amount_micro,
            ) from None
        except DB_ERRORS:
            raise errors.DependencyDown() from None

    async def mark_sent(
        self,
        *,
        request_id: str,
        group_id: int,
        api_key_id: int | None,
        amount_micro: int,
        hold_taken: bool,
    ) -> bool:
        """Record that a platform call is about to be sent, before it is; return whether the
        request now has a hold (marked).

        The request's hold is marked; a request without one (`hold_taken` false) takes a hold
        of its worst case now, marked (one statement on PostgreSQL), naming its key. If the
        gateway dies before the usage row is stored, the reaper charges it (to the group and
        the key) instead of releasing it at 0.

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
                await self.run(mark_hold_sent(request_id), wait_s=MARK_WAIT_S)
            elif self._pg is not None:
                await self._pg.one_statement(
                    SENT_HOLD_ONE_STATEMENT,
                    {
                        "request": request_id,
                        "group": group_id,
                        "key": api_key_id,
                        "amount": amount_micro,
                        "now": now,
                        "expires": now + timedelta(seconds=self.ttl_s),
                    },
                    wait_s=MARK_WAIT_S,
                )
            else:
                hold = Hold(
                    request_id=request_id,
                    group_id=group_id,
                    api_key_id=api_key_id,
                    key_budgeted=False,
                    amount_micro=amount_micro,
                )
                await self.run(take_hold(hold, now=now, ttl_s=self.ttl_s, call_sent=True))
        except DB_ERRORS:
            metrics.UNMARKED_CALLS.inc()
            self._marks_off_until = time.monotonic() + MARKS_OFF_S
            if time.monotonic() - self._unmarked_warned_at > 60:  # one line a minute, not a flood
                self._unmarked_warned_at = time.monotonic()
                log.warning("database unreachable: platform calls are served without crash marks")
            return hold_taken
        return True

    def _cancel_reserved_ahead(self, taken: HoldTaken | Refusal) -> None:
        if isinstance(taken, HoldTaken) and taken.reservation_id is not None:
            self._cancel_later(taken.reservation_id)

    def _cancel_later(self, reservation_id: int) -> None:
        task = asyncio.get_running_loop().create_task(self.cancel(reservation_id))
        self._cancelling.add(task)
        task.add_done_callback(self._cancelling.discard)

    async def cancel(self, reservation_id: int) -> None:
        try:
            await self.run(cancel_reservation(reservation_id, now=timezone.now()))
        except DB_ERRORS:
            log.error("could not cancel reservation %s; the reaper will expire it", reservation_id)
