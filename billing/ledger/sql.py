"""What every ledger step is built from: the tables by model, the budget-room and wallet
checks every compare-and-set uses, a batch's rows as one parameter, and `Refused`."""

from __future__ import annotations

from collections.abc import Iterable

import orjson
from django.db import connection

from accounts.models import Account, ApiKey, Group
from billing.models import (
    BudgetAlert,
    BudgetPeriod,
    CallerSpend,
    LedgerEntry,
    Reservation,
    SettledRequest,
    SpendHold,
    Wallet,
)
from core.db import values_placeholders

# Every table a step writes or reads, named by its model.
ACCOUNTS = Account._meta.db_table
GROUPS = Group._meta.db_table
KEYS = ApiKey._meta.db_table
WALLETS = Wallet._meta.db_table
RESERVATIONS = Reservation._meta.db_table
LEDGER_ENTRIES = LedgerEntry._meta.db_table
HOLDS = SpendHold._meta.db_table
SETTLED = SettledRequest._meta.db_table
CALLER_SPENDS = CallerSpend._meta.db_table
PERIODS = BudgetPeriod._meta.db_table
ALERTS = BudgetAlert._meta.db_table

# The columns a hold's and a reservation's INSERT name (holds.py, wallet.py, fused.py).
HOLD_COLUMNS = (
    "request_id, group_id, api_key_id, request_key_id, caller_spend_id, amount_micro, status,"
    " call_sent, created_at, expires_at"
)
RESERVATION_COLUMNS = (
    "wallet_id, request_id, group_id, api_key_id, attempt_no, amount_micro, committed_micro,"
    " excess_micro, status, call_sent, unmeasured, created_at, expires_at"
)


class Refused(Exception):
    """A money step was refused: the budget or wallet cannot cover it."""


def room(
    *, amount: str, now: str | None, row: str = "", budget: str | None = None, ahead: str = ""
) -> str:
    """The budget room check of a hold of `amount`: refused once spent + reserved reached the
    budget (zero credit is a hard stop, even for a zero hold) or when the hold would pass it.

    `now`: spent reads 0 once the row's period ended (None: a row without periods). `budget`:
    the budget's expression (default the row's budget_max_micro, where NULL means none).
    `ahead`: what a batch holds before its largest hold, which must still find room first.
    """
    spent = (
        f"{row}spent_micro"
        if now is None
        else f"(CASE WHEN {row}period_ends_at <= {now} THEN 0 ELSE {row}spent_micro END)"
    )
    limit = budget or f"{row}budget_max_micro"
    taken = f"{spent} + {row}reserved_micro"
    check = f"{limit} > {taken}{f' + {ahead}' if ahead else ''} AND {limit} >= {taken} + {amount}"
    return f"({check})" if budget else f"({limit} IS NULL OR ({check}))"


def wallet_covers(amount: str, *, row: str = "") -> str:
    """The wallet check of a reservation of `amount`: the balance covers what it holds."""
    return f"{row}balance_micro >= {row}reserved_micro + {amount}"


ROOM = room(amount="%s", now="%s")  # parameters: now, now, amount
BUDGET_ROOM = room(amount="%s", now=None, budget="%s")  # parameters: amount, budget, budget


def batch_rows(types: tuple[str, ...], rows: list[tuple]) -> tuple[str, tuple]:
    """A batch's rows as a statement's row source, with its parameters: `VALUES (..), (..)`;
    on PostgreSQL one JSON parameter instead, so the statement's text (which the driver
    parses on every call) does not grow with the batch. `types`: each column's SQL type."""
    if connection.vendor == "postgresql":
        columns = ", ".join(f"(e->>{i})::{t}" for i, t in enumerate(types))
        return (
            f"SELECT {columns} FROM json_array_elements(%s::json) AS e",
            (orjson.dumps(rows).decode(),),
        )
    params = tuple(value for row in rows for value in row)
    return f"VALUES {values_placeholders(len(rows), len(types))}", params


def request_span(request_ids: Iterable[str]) -> tuple[str, str]:
    """The lowest and highest of a batch's request ids, for `request_id BETWEEN %s AND %s`.

    The per-request tables are partitioned by month of request id (billing/partitions.py).
    A batch's ids arrive as one JSON parameter, which PostgreSQL cannot prune by; two plain
    bounds it can, even in the generic plan a prepared statement settles on, so a batch
    reads the month or two it spans instead of every month kept.
    """
    ids = sorted(request_ids)
    return ids[0], ids[-1]
