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


def take_hold(h: Hold, *, now: datetime, ttl_s: int) -> Program:
    """Hold the request's worst case on group, key and caller, or refuse (LM-4001).

    Refused when spent + reserved >= budget_max (zero credit is a hard stop, even for a
    zero estimate) or when the hold would pass budget_max.
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
        " amount_micro, status, created_at, expires_at)"
        " VALUES (%s, %s, %s, %s, %s, 'held', %s, %s) RETURNING id",
        (
            h.request_id,
            h.group_id,
            h.api_key_id if h.key_budgeted else None,
            caller_spend_id,
            amount,
            now,
            now + timedelta(seconds=ttl_s),
        ),
    )
    return True


def reserve(
    *,
    account_id: int,
    request_id: str,
    attempt_no: int,
    amount_micro: int,
    now: datetime,
    ttl_s: int,
) -> Program:
    """Hold a platform attempt's worst case on the wallet, or refuse (LM-4002)."""
    row = yield (
        "UPDATE billing_wallet SET reserved_micro = reserved_micro + %s, updated_at = %s"
        " WHERE account_id = %s AND balance_micro >= reserved_micro + %s RETURNING id",
        (amount_micro, now, account_id, amount_micro),
    )
    if row is None:
        raise Refused("wallet")
    row = yield (
        "INSERT INTO billing_reservation (wallet_id, request_id, attempt_no, amount_micro,"
        " committed_micro, excess_micro, status, created_at, expires_at)"
        " VALUES (%s, %s, %s, %s, 0, 0, 'pending', %s, %s) RETURNING id",
        (row[0], request_id, attempt_no, amount_micro, now, now + timedelta(seconds=ttl_s)),
    )
    return row[0]


# PostgreSQL runs `reserve` as this one statement (data-modifying CTEs are PostgreSQL's):
# the wallet's compare-and-set and the reservation row commit together, in one round trip.
RESERVE_ONE_STATEMENT = (
    "WITH wallet AS (UPDATE billing_wallet SET reserved_micro = reserved_micro + %(amount)s,"
    " updated_at = %(now)s WHERE account_id = %(account)s"
    " AND balance_micro >= reserved_micro + %(amount)s RETURNING id)"
    " INSERT INTO billing_reservation (wallet_id, request_id, attempt_no, amount_micro,"
    " committed_micro, excess_micro, status, created_at, expires_at)"
    " SELECT id, %(request)s, %(attempt)s, %(amount)s, 0, 0, 'pending', %(now)s, %(expires)s"
    " FROM wallet RETURNING id"
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


def release_hold(request_id: str, *, status: str, group_id: int, api_key_id: int | None) -> Program:
    """Release a request's hold, if still held, without charging anything (the reaper)."""
    hold = yield (
        "UPDATE billing_spendhold SET status = %s WHERE request_id = %s AND status = 'held'"
        " RETURNING amount_micro, api_key_id, caller_spend_id",
        (status, request_id),
    )
    if hold is None:
        return False
    held, held_key, caller_spend_id = hold
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
    return True
