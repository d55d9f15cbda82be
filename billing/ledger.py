"""Money steps of the request path, written once as programs of portable SQL.

Holds and reservations are taken here, before any upstream call; what a finished request
owes is applied in batches when its usage row is stored (billing/settlement.py).

Each program is a generator: it yields `(sql, params)` and receives the statement's first
row (or None), and raises Refused to roll back. A driver (billing/sqlexec.py) runs it in
one transaction: on PostgreSQL with async psycopg on the event loop (no thread hop), on
SQLite through Django's connection in the single database thread. Every balance changes
by a compare-and-set UPDATE (`... WHERE <room> RETURNING`), never check-then-write, so
concurrent requests can never take a balance below zero or past a budget.

Statements use only what both databases share: UPDATE/INSERT ... RETURNING, ON CONFLICT
DO NOTHING, CASE; timestamps are parameters. Every statement has a RETURNING clause (the
drivers always fetch one row).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime, timedelta

Program = Generator[tuple[str, tuple], tuple | None, object]


class Refused(Exception):
    """A money step was refused: the budget or wallet cannot cover it."""


ROOM = (
    "(budget_max_micro IS NULL OR (budget_max_micro > spent_micro + reserved_micro"
    " AND budget_max_micro >= spent_micro + reserved_micro + %s))"
)


@dataclass(frozen=True, slots=True)
class CallerBudget:
    group_id: int
    label: str
    period: str
    budget_max_micro: int


@dataclass(frozen=True, slots=True)
class Hold:
    request_id: str
    group_id: int
    api_key_id: int | None
    key_budgeted: bool
    amount_micro: int
    caller: CallerBudget | None = None


def take_hold(h: Hold, *, now: datetime, ttl_s: int, call_sent: bool = False) -> Program:
    """Hold the request's worst case on group, key and caller, or refuse (LM-4001).

    Refused when spent + reserved >= budget_max (zero credit is a hard stop, even for a
    zero estimate) or when the hold would pass budget_max. `call_sent` takes it as the
    crash marker of a platform call about to be sent (a group without a budget).
    """
    amount = h.amount_micro
    row = yield (
        f"UPDATE accounts_group SET reserved_micro = reserved_micro + %s WHERE id = %s AND {ROOM}"
        " RETURNING id",
        (amount, h.group_id, amount),
    )
    if row is None:
        raise Refused("group budget")
    if h.key_budgeted:
        row = yield (
            f"UPDATE accounts_apikey SET reserved_micro = reserved_micro + %s WHERE id = %s"
            f" AND {ROOM} RETURNING id",
            (amount, h.api_key_id, amount),
        )
        if row is None:
            raise Refused("key budget")
    caller_spend_id = None
    if h.caller is not None:
        c = h.caller
        yield (
            "INSERT INTO billing_callerspend (group_id, caller_label, period, spent_micro,"
            " reserved_micro) VALUES (%s, %s, %s, 0, 0)"
            " ON CONFLICT (group_id, caller_label, period) DO NOTHING RETURNING id",
            (c.group_id, c.label, c.period),
        )
        row = yield (
            "UPDATE billing_callerspend SET reserved_micro = reserved_micro + %s"
            " WHERE group_id = %s AND caller_label = %s AND period = %s"
            " AND %s > spent_micro + reserved_micro AND %s >= spent_micro + reserved_micro + %s"
            " RETURNING id",
            (amount, c.group_id, c.label, c.period, c.budget_max_micro, c.budget_max_micro, amount),
        )
        if row is None:
            raise Refused("caller budget")
        caller_spend_id = row[0]
    yield (
        "INSERT INTO billing_spendhold (request_id, group_id, api_key_id, caller_spend_id,"
        " amount_micro, status, call_sent, created_at, expires_at)"
        " VALUES (%s, %s, %s, %s, %s, 'held', %s, %s, %s) RETURNING id",
        (
            h.request_id,
            h.group_id,
            h.api_key_id if h.key_budgeted else None,
            caller_spend_id,
            amount,
            call_sent,
            now,
            now + timedelta(seconds=ttl_s),
        ),
    )
    return True


def mark_hold_sent(request_id: str) -> Program:
    """Record, before a platform vendor call is sent, that the request's hold is being served."""
    row = yield (
        "UPDATE billing_spendhold SET call_sent = TRUE WHERE request_id = %s AND status = 'held'"
        " RETURNING id",
        (request_id,),
    )
    return row is not None


# PostgreSQL takes the crash marker of a request without a budget (so without a hold yet) in
# one statement, right before its platform call: the group's reserved and the hold together.
SENT_HOLD_ONE_STATEMENT = (
    "WITH grp AS (UPDATE accounts_group SET reserved_micro = reserved_micro + %(amount)s"
    " WHERE id = %(group)s RETURNING id)"
    " INSERT INTO billing_spendhold (request_id, group_id, api_key_id, caller_spend_id,"
    " amount_micro, status, call_sent, created_at, expires_at)"
    " SELECT %(request)s, id, NULL, NULL, %(amount)s, 'held', TRUE, %(now)s, %(expires)s"
    " FROM grp RETURNING id"
)


def reserve(
    *,
    account_id: int,
    request_id: str,
    group_id: int,
    api_key_id: int | None,
    attempt_no: int,
    amount_micro: int,
    now: datetime,
    ttl_s: int,
) -> Program:
    """Hold a platform attempt's worst case on the wallet, or refuse (LM-4002).

    Taken right before the vendor call, so the reservation records the call as sent: a
    crash from here on leaves a served request, which the reaper commits.
    """
    row = yield (
        "UPDATE billing_wallet SET reserved_micro = reserved_micro + %s, updated_at = %s"
        " WHERE account_id = %s AND balance_micro >= reserved_micro + %s RETURNING id",
        (amount_micro, now, account_id, amount_micro),
    )
    if row is None:
        raise Refused("wallet")
    row = yield (
        "INSERT INTO billing_reservation (wallet_id, request_id, group_id, api_key_id,"
        " attempt_no, amount_micro, committed_micro, excess_micro, status, call_sent,"
        " unmeasured, created_at, expires_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, 0, 0, 'pending', TRUE, FALSE, %s, %s) RETURNING id",
        (
            row[0],
            request_id,
            group_id,
            api_key_id,
            attempt_no,
            amount_micro,
            now,
            now + timedelta(seconds=ttl_s),
        ),
    )
    return row[0]


# PostgreSQL runs `reserve` as this one statement (data-modifying CTEs are PostgreSQL's):
# the wallet's compare-and-set and the reservation row commit together, in one round trip.
RESERVE_ONE_STATEMENT = (
    "WITH wallet AS (UPDATE billing_wallet SET reserved_micro = reserved_micro + %(amount)s,"
    " updated_at = %(now)s WHERE account_id = %(account)s"
    " AND balance_micro >= reserved_micro + %(amount)s RETURNING id)"
    " INSERT INTO billing_reservation (wallet_id, request_id, group_id, api_key_id, attempt_no,"
    " amount_micro, committed_micro, excess_micro, status, call_sent, unmeasured, created_at,"
    " expires_at)"
    " SELECT id, %(request)s, %(group)s, %(key)s, %(attempt)s, %(amount)s, 0, 0, 'pending',"
    " TRUE, FALSE, %(now)s, %(expires)s FROM wallet RETURNING id"
)


def resolve_reservation(
    reservation_id: int, *, status: str, cost_micro: int, now: datetime
) -> Program:
    """Commit (at cost, capped at the hold; excess recorded) or cancel / expire, once."""
    debit = cost_micro if status == "committed" else 0
    row = yield (
        "UPDATE billing_reservation SET status = %s,"
        " committed_micro = CASE WHEN %s < amount_micro THEN %s ELSE amount_micro END,"
        " excess_micro = CASE WHEN %s > amount_micro THEN %s - amount_micro ELSE 0 END,"
        " resolved_at = %s WHERE id = %s AND status = 'pending'"
        " RETURNING wallet_id, amount_micro, committed_micro, request_id",
        (status, debit, debit, debit, debit, now, reservation_id),
    )
    if row is None:
        return False  # resolved already (by settle, the reaper, or a cancel)
    wallet_id, amount, committed, request_id = row
    row = yield (
        "UPDATE billing_wallet SET reserved_micro = reserved_micro - %s,"
        " balance_micro = balance_micro - %s, updated_at = %s WHERE id = %s"
        " RETURNING balance_micro",
        (amount, committed, now, wallet_id),
    )
    if status == "committed":
        yield (
            "INSERT INTO billing_ledgerentry (wallet_id, kind, amount_micro,"
            " balance_after_micro, reservation_id, reason, created_at)"
            " VALUES (%s, 'commit', %s, %s, %s, %s, %s) RETURNING id",
            (wallet_id, -committed, row[0], reservation_id, f"request {request_id}", now),
        )
    return True


def _charge_unmeasured(
    request_id: str,
    *,
    group_id: int,
    api_key_id: int | None,
    caller_spend_id: int | None,
    cost_micro: int,
    now: datetime,
) -> Program:
    """Charge a served request whose usage never arrived, once (the settled-request marker)."""
    marked = yield (
        "INSERT INTO billing_settledrequest (request_id, group_id, api_key_id, bandwidth_micro,"
        " provider_cost_micro, source, created_at) VALUES (%s, %s, %s, 0, %s, 'reaper', %s)"
        " ON CONFLICT (request_id) DO NOTHING RETURNING id",
        (request_id, group_id, api_key_id, cost_micro, now),
    )
    if marked is None or not cost_micro:
        return False
    yield (
        "UPDATE accounts_group SET spent_micro = spent_micro + %s,"
        " settled_micro = settled_micro + %s WHERE id = %s RETURNING id",
        (cost_micro, cost_micro, group_id),
    )
    if api_key_id is not None:
        yield (
            "UPDATE accounts_apikey SET spent_micro = spent_micro + %s WHERE id = %s RETURNING id",
            (cost_micro, api_key_id),
        )
    if caller_spend_id is not None:
        yield (
            "UPDATE billing_callerspend SET spent_micro = spent_micro + %s WHERE id = %s"
            " RETURNING id",
            (cost_micro, caller_spend_id),
        )
    return True


def reap_reservation(reservation_id: int, *, now: datetime) -> Program:
    """Resolve an expired reservation: committed at the hold if its call was sent, else released.

    A sent call whose usage never arrived was served by a gateway that died: the wallet is
    debited the hold, marked unmeasured for reconciliation. A request that took no budget
    hold is charged to its group's counters here too; one with a hold is charged with it.
    """
    row = yield (
        "UPDATE billing_reservation SET"
        " status = CASE WHEN call_sent THEN 'committed' ELSE 'expired' END,"
        " committed_micro = CASE WHEN call_sent THEN amount_micro ELSE 0 END,"
        " unmeasured = call_sent, resolved_at = %s WHERE id = %s AND status = 'pending'"
        " RETURNING wallet_id, amount_micro, committed_micro, request_id, group_id, api_key_id",
        (now, reservation_id),
    )
    if row is None:
        return False  # resolved already (by settle, a cancel, or another reaper)
    wallet_id, amount, committed, request_id, group_id, api_key_id = row
    balance = yield (
        "UPDATE billing_wallet SET reserved_micro = reserved_micro - %s,"
        " balance_micro = balance_micro - %s, updated_at = %s WHERE id = %s"
        " RETURNING balance_micro",
        (amount, committed, now, wallet_id),
    )
    if not committed:
        return True
    yield (
        "INSERT INTO billing_ledgerentry (wallet_id, kind, amount_micro,"
        " balance_after_micro, reservation_id, reason, created_at)"
        " VALUES (%s, 'commit', %s, %s, %s, %s, %s) RETURNING id",
        (
            wallet_id,
            -committed,
            balance[0],
            reservation_id,
            f"unmeasured: request {request_id}",
            now,
        ),
    )
    hold = yield ("SELECT id FROM billing_spendhold WHERE request_id = %s", (request_id,))
    if hold is None and group_id is not None:
        yield from _charge_unmeasured(
            request_id,
            group_id=group_id,
            api_key_id=api_key_id,
            caller_spend_id=None,
            cost_micro=committed,
            now=now,
        )
    return True


def reap_hold(request_id: str, *, now: datetime) -> Program:
    """Resolve an expired budget hold: charged if a platform call was sent, else released at 0.

    Sent means the hold was marked before a platform call, or the request reserved its wallet
    (a reservation is taken right before its call). The charge is the hold (the request's
    worst case), unmeasured; a hold whose call never left is released uncharged.
    """
    hold = yield (
        "UPDATE billing_spendhold SET status = CASE WHEN call_sent OR EXISTS (SELECT 1 FROM"
        " billing_reservation r WHERE r.request_id = billing_spendhold.request_id AND"
        " r.call_sent) THEN 'charged' ELSE 'expired' END"
        " WHERE request_id = %s AND status = 'held'"
        " RETURNING amount_micro, group_id, api_key_id, caller_spend_id, status",
        (request_id,),
    )
    if hold is None:
        return False
    held, group_id, held_key, caller_spend_id, status = hold
    yield (
        "UPDATE accounts_group SET reserved_micro = reserved_micro - %s WHERE id = %s RETURNING id",
        (held, group_id),
    )
    if held_key is not None:
        yield (
            "UPDATE accounts_apikey SET reserved_micro = reserved_micro - %s WHERE id = %s"
            " RETURNING id",
            (held, held_key),
        )
    if caller_spend_id is not None:
        yield (
            "UPDATE billing_callerspend SET reserved_micro = reserved_micro - %s WHERE id = %s"
            " RETURNING id",
            (held, caller_spend_id),
        )
    if status == "charged":
        yield from _charge_unmeasured(
            request_id,
            group_id=group_id,
            api_key_id=held_key,
            caller_spend_id=caller_spend_id,
            cost_micro=held,
            now=now,
        )
    return True
