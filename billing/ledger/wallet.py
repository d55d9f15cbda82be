"""Every balance change in Tollgate, each one named program of portable SQL.

step                  moves                                         used by
take_hold             group, key, caller, tags reserved += hold     request path (escrow)
mark_hold_sent        nothing: marks the hold's call sent           request path
release_holds         group, key, caller, tags reserved -= hold     settle, reaper
reserve               wallet reserved += hold                       request path
commit_reservations   wallet reserved -= hold, balance -= cost      settle, reaper
collect_excess        wallet balance -= cost above the hold, as     settle (commit, true-up)
                      far as what it has available covers it
cancel_reservation    wallet reserved -= hold                       request path, reaper
charge                group spent, settled; key, caller, tags spent settle, reaper, reconcile
charge_bandwidth      group, key, caller, tags spent by a correction reconcile
credit_wallet         wallet balance: opening, top-up, adjustment   billing.services
roll_periods          group, key spent -> 0 at a period's end,      settle, reaper, beat
                      the closing spent recorded (BudgetPeriod)     (billing.tasks)
raise_alerts          nothing: records thresholds spend reached     settle

The request path runs the fused forms of two steps, built here from the same checks (`room`,
`wallet_covers`) and rows: `take_hold_statement` (and `take_holds_statement` for a group's
batch), `reserve_statement` (`reserve_many_statement`), and `hold_and_reserve_statement`
(both at once, before a request's first call). Each is one statement, so it commits alone;
each says a refusal by what it returns, never by failing. Table names come from the models.

Nothing else in Tollgate writes a balance, a counter, a hold, a reservation, a settled-request
marker or a ledger entry. The composites below only chain these steps: `settle` (a batch of
stored usage rows, run by billing/settlement.py in the writer's transaction), `reap_hold`
and `reap_reservation` (billing/reaper.py), and billing/reconcile.py's window correction.

Batches. `release_holds`, `commit_reservations` and `charge` take lists: a single request is
a list of one, a batch of usage rows is the same step with many, so the batch form is the
single form (tests/billing/test_money_fuzz.py checks a batch and one-by-one agree). Steps
that move group, key and caller counters can share a `Moves`: each counter row is then
updated once per transaction, after the holds and markers that justify the move.

Programs. Each is a generator: it yields `(sql, params)` and receives the statement's first
row (or None), or yields `(sql, params, ALL)` and receives every row; it raises Refused to
roll back. A driver (core/sqlexec.py) runs it in one transaction: on PostgreSQL with
async psycopg on the event loop (no thread hop), elsewhere through Django's connection.
Every balance changes by a compare-and-set UPDATE (`... WHERE <room> RETURNING`), never
check-then-write, so concurrent requests can never take a balance below zero or past a
budget; each status moves only from held / pending, once.

Lock order, the same in every program (so concurrent programs wait, never deadlock):
reservation -> wallet -> ledger entry -> spend hold -> settled marker -> group -> key ->
caller spend -> tag spend (billing/tag_ledger.py). `take_hold` locks group, key, caller,
tags, then inserts a new hold.

Budget periods. A group or key with a daily or monthly budget period counts in spent_micro
the spend of its current period, which ends at period_ends_at (local midnight in the
account's time zone: accounts/periods.py). The room check reads spent as 0 once that instant
passed, so a hold right after the boundary sees the fresh budget before anything rolled
it; `roll_periods` then records the closed period with its exact spent and starts the next
at 0, under the row's lock. Counter moves that charge (`move_counters(now=...)`: settle,
the reaper) roll each row they charge first, in lock order, so a charge after the boundary
lands in the new period; a beat task rolls idle rows. `raise_alerts` records, after a
settle's charges, each alert threshold the charged rows' spent reached (once per period).

Statements use only what PostgreSQL and SQLite share: UPDATE/INSERT ... RETURNING, ON
CONFLICT DO NOTHING, CASE, UPDATE ... FROM a VALUES list; timestamps are parameters. Every
statement has a RETURNING clause (the async driver always fetches).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import orjson
from django.db import connection

from accounts.models import Account, ApiKey, Group
from accounts.periods import period_bounds
from billing import tag_ledger
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
from core.money import spend_micro
from core.sqlexec import ALL, Program

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

_HOLD_COLUMNS = (
    "request_id, group_id, api_key_id, request_key_id, caller_spend_id, amount_micro, status,"
    " call_sent, created_at, expires_at"
)
_RESERVATION_COLUMNS = (
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
_BUDGET_ROOM = room(amount="%s", now=None, budget="%s")  # parameters: amount, budget, budget


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


# ---------------------------------------------------------------- counters


@dataclass
class Moves:
    """What one transaction moves on group, key and caller counters, applied once per row.

    Groups: [spent, settled, reserved, uncollected]; keys: [spent, reserved, uncollected];
    callers: [spent, reserved].
    """

    groups: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0, 0]))
    keys: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0]))
    callers: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    # Tag spends (billing/tag_ledger.py), by (tag, period, id): [spent, reserved].
    tags: dict[tuple, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def charged(self, c: Charge, *, bandwidth_micro: int | None = None) -> None:
        bandwidth = c.bandwidth_micro if bandwidth_micro is None else bandwidth_micro
        spent = spend_micro(cost_micro=c.cost_micro, bandwidth_micro=bandwidth)
        g = self.groups[c.group_id]
        g[0] += spent
        g[1] += c.cost_micro
        g[3] += c.uncollected_micro
        if c.api_key_id is not None:
            self.keys[c.api_key_id][0] += spent
            self.keys[c.api_key_id][2] += c.uncollected_micro
        if c.caller_spend_id is not None:
            self.callers[c.caller_spend_id][0] += spent
        for ref in c.tag_spends:
            self.tags[ref][0] += spent

    def released(self, h: Held) -> None:
        self.groups[h.group_id][2] -= h.amount_micro
        if h.held_key_id is not None:
            self.keys[h.held_key_id][1] -= h.amount_micro
        if h.caller_spend_id is not None:
            self.callers[h.caller_spend_id][1] -= h.amount_micro
        for ref in h.tag_spends:
            self.tags[ref][1] -= h.amount_micro


def move_counters(moves: Moves, *, now: datetime | None = None) -> Program[None]:
    """Apply a transaction's counter moves: one UPDATE per group, key and caller, by id.

    With `now` (a charge of fresh spend), each group and key whose budget period ended is
    rolled right before its own move (one read finds them), so the charge lands in the
    period it was made in and every row is still locked in the ledger's order.
    """
    ended: dict[tuple[str, int], tuple[str, str]] = {}
    if now is not None:
        charged_groups = [g for g, (spent, *_) in moves.groups.items() if spent]
        charged_keys = [k for k, (spent, *_) in moves.keys.items() if spent]
        if charged_groups or charged_keys:
            ended = yield from ended_periods(
                now=now, group_ids=charged_groups, key_ids=charged_keys
            )
    for group_id, (spent, settled, reserved, uncollected) in sorted(moves.groups.items()):
        if ("group", group_id) in ended:
            assert now is not None  # `ended` is only filled when `now` is given
            yield from _roll("group", group_id, *ended["group", group_id], now=now)
        if spent or settled or reserved or uncollected:
            # What the wallet could not cover moves with what was taken: one statement.
            yield (
                f"UPDATE {GROUPS} SET spent_micro = spent_micro + %s,"
                " settled_micro = settled_micro + %s, reserved_micro = reserved_micro + %s,"
                " uncollected_micro = uncollected_micro + %s WHERE id = %s RETURNING id",
                (spent, settled, reserved, uncollected, group_id),
            )
    for key_id, (spent, reserved, uncollected) in sorted(moves.keys.items()):
        if ("key", key_id) in ended:
            assert now is not None  # `ended` is only filled when `now` is given
            yield from _roll("key", key_id, *ended["key", key_id], now=now)
        if spent or reserved or uncollected:
            yield (
                f"UPDATE {KEYS} SET spent_micro = spent_micro + %s,"
                " reserved_micro = reserved_micro + %s,"
                " uncollected_micro = uncollected_micro + %s WHERE id = %s RETURNING id",
                (spent, reserved, uncollected, key_id),
            )
    for caller_spend_id, (spent, reserved) in sorted(moves.callers.items()):
        if spent or reserved:
            yield (
                f"UPDATE {CALLER_SPENDS} SET spent_micro = spent_micro + %s,"
                " reserved_micro = reserved_micro + %s WHERE id = %s RETURNING id",
                (spent, reserved, caller_spend_id),
            )
    yield from tag_ledger.move_tag_counters(moves.tags)
    moves.groups.clear()
    moves.keys.clear()
    moves.callers.clear()
    moves.tags.clear()


# ---------------------------------------------------------------- budget holds


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
    api_key_id: int | None  # the request's key: named on the hold, so a reaper charge hits it
    key_budgeted: bool  # the hold also reserves on the key (checked against its budget)
    amount_micro: int
    caller: CallerBudget | None = None
    tags: tuple[tag_ledger.TagHold, ...] = ()  # the request's budgeted tags


@dataclass(frozen=True, slots=True)
class FirstReservation:
    """A request's first platform attempt's wallet reservation (attempt 1), asked for with
    its budget hold (`HOLD_AND_RESERVE_STATEMENT`)."""

    account_id: int
    api_key_id: int | None
    amount_micro: int


@dataclass(frozen=True, slots=True)
class Held:
    """A budget hold as it was released."""

    request_id: str
    amount_micro: int
    group_id: int
    held_key_id: int | None  # the key the hold reserved on (a budgeted key): released with it
    # The request's key, charged with the hold if the reaper charges it: the hold's
    # request_key, or for a hold a release before billing 0015 wrote, the key it held on.
    request_key_id: int | None
    caller_spend_id: int | None
    status: str
    tag_spends: tuple[tag_ledger.TagSpendRef, ...] = ()


def take_hold(h: Hold, *, now: datetime, ttl_s: int, call_sent: bool = False) -> Program[bool]:
    """Hold the request's worst case on group, key and caller, or refuse (LM-4001).

    Refused when spent + reserved >= budget_max (zero credit is a hard stop, even for a
    zero estimate) or when the hold would pass budget_max. `call_sent` takes it as the
    crash marker of a platform call about to be sent (a group without a budget). The hold
    names the request's key even when it does not reserve on it (`key_budgeted` false), so
    a charge the reaper makes with it reaches the key as a normal finish does.
    """
    amount = h.amount_micro
    row = yield (
        f"UPDATE {GROUPS} SET reserved_micro = reserved_micro + %s WHERE id = %s AND {ROOM}"
        " RETURNING id",
        (amount, h.group_id, now, now, amount),
    )
    if row is None:
        raise Refused("group budget")
    if h.key_budgeted:
        row = yield (
            f"UPDATE {KEYS} SET reserved_micro = reserved_micro + %s WHERE id = %s"
            f" AND {ROOM} RETURNING id",
            (amount, h.api_key_id, now, now, amount),
        )
        if row is None:
            raise Refused("key budget")
    caller_spend_id = None
    if h.caller is not None:
        c = h.caller
        yield (
            f"INSERT INTO {CALLER_SPENDS} (group_id, caller_label, period, spent_micro,"
            " reserved_micro) VALUES (%s, %s, %s, 0, 0)"
            " ON CONFLICT (group_id, caller_label, period) DO NOTHING RETURNING id",
            (c.group_id, c.label, c.period),
        )
        row = yield (
            f"UPDATE {CALLER_SPENDS} SET reserved_micro = reserved_micro + %s"
            " WHERE group_id = %s AND caller_label = %s AND period = %s"
            f" AND {_BUDGET_ROOM} RETURNING id",
            (amount, c.group_id, c.label, c.period, c.budget_max_micro, c.budget_max_micro, amount),
        )
        if row is None:
            raise Refused("caller budget")
        caller_spend_id = row[0]
    tags = yield from tag_ledger.hold_tags(h.tags, amount, check=_BUDGET_ROOM)
    if isinstance(tags, str):
        raise Refused(tags)
    yield from tag_ledger.record_tag_holds(h.request_id, tags)
    yield (
        f"INSERT INTO {HOLDS} ({_HOLD_COLUMNS})"
        " VALUES (%s, %s, %s, %s, %s, %s, 'held', %s, %s, %s) RETURNING id",
        (
            h.request_id,
            h.group_id,
            h.api_key_id if h.key_budgeted else None,
            h.api_key_id,
            caller_spend_id,
            amount,
            call_sent,
            now,
            now + timedelta(seconds=ttl_s),
        ),
    )
    return True


def mark_hold_sent(request_id: str) -> Program[bool]:
    """Record, before a platform vendor call is sent, that the request's hold is being served."""
    row = yield (
        f"UPDATE {HOLDS} SET call_sent = TRUE WHERE request_id = %s AND status = 'held'"
        " RETURNING id",
        (request_id,),
    )
    return row is not None


# The request path's fused forms of `take_hold` and `reserve`: each step's compare-and-set and
# its row in one statement (PostgreSQL's data-modifying CTE), so they commit together, in one
# round trip. Built here from the same checks and rows as the programs above and below.


def _group_hold(*, checked: bool, when: str = "") -> str:
    """The CTE `grp` moving the group's reserved by %(amount)s (`checked`: within its room)."""
    guard = f" AND {room(amount='%(amount)s', now='%(now)s')}" if checked else ""
    return (
        f"grp AS (UPDATE {GROUPS} SET reserved_micro = reserved_micro + %(amount)s"
        f" WHERE id = %(group)s{when}{guard} RETURNING id)"
    )


def _hold_row(*, call_sent: str, source: str = "grp") -> str:
    """The INSERT of the request's hold for the group `source` returned (group-only holds:
    no key held on; the request's key %(key)s named, for a reaper's charge)."""
    return (
        f"INSERT INTO {HOLDS} ({_HOLD_COLUMNS}) SELECT %(request)s, {source}.id, NULL, %(key)s,"
        f" NULL, %(amount)s, 'held', {call_sent}, %(now)s, %(expires)s FROM {source}"
    )


def take_hold_statement(*, call_sent: bool = False) -> str:
    """`take_hold` of a hold only the group's budget bounds, in one statement: no row back is
    the refusal, and a refused group inserts nothing. `call_sent`: the crash marker of a
    platform call about to be sent, for a group without a budget (nothing to refuse)."""
    grp = _group_hold(checked=not call_sent)
    return f"WITH {grp} {_hold_row(call_sent='TRUE' if call_sent else 'FALSE')} RETURNING id"


def take_holds_statement() -> str:
    """`take_hold` for many group-only holds on one group (arrays of request ids, amounts and
    the requests' keys): all are taken, or none (then each on its own, for its own verdict).
    The room check is the one the holds would pass one by one, the largest last. Returns
    their request ids."""
    check = room(amount="tot.total", now="%(now)s", row="g.", ahead="tot.total - tot.largest")
    return (
        "WITH req AS (SELECT * FROM unnest(%(requests)s::text[], %(amounts)s::bigint[],"
        " %(keys)s::bigint[]) AS r(request_id, amount, key_id)),"
        " tot AS (SELECT sum(amount) AS total, max(amount) AS largest FROM req),"
        f" grp AS (UPDATE {GROUPS} g SET reserved_micro = g.reserved_micro + tot.total FROM tot"
        f" WHERE g.id = %(group)s AND {check} RETURNING g.id)"
        f" INSERT INTO {HOLDS} ({_HOLD_COLUMNS})"
        " SELECT req.request_id, grp.id, NULL, req.key_id, NULL, req.amount, 'held', FALSE,"
        " %(now)s, %(expires)s FROM req, grp RETURNING request_id"
    )


HOLD_ONE_STATEMENT = take_hold_statement()
HOLD_MANY_STATEMENT = take_holds_statement()
SENT_HOLD_ONE_STATEMENT = take_hold_statement(call_sent=True)

# A reaped hold is charged if a platform call was sent for it: marked before the call, or
# the request reserved its wallet (a reservation is taken right before its call).
_REAPED_STATUS = (
    f"CASE WHEN call_sent OR EXISTS (SELECT 1 FROM {RESERVATIONS} r"
    f" WHERE r.request_id = {HOLDS}.request_id AND r.call_sent)"
    " THEN 'charged' ELSE 'expired' END"
)


def release_holds(
    request_ids: Iterable[str], *, reaped: bool = False, moves: Moves | None = None
) -> Program[dict[str, Held]]:
    """Release the requests' budget holds still held, once; return them by request id.

    Settled by their usage rows (status 'settled'), or `reaped`: 'charged' if their call was
    sent (the caller charges them), else 'expired'. The counters move now, or with `moves`.
    """
    ids = list(dict.fromkeys(request_ids))
    if not ids:
        return {}
    status = _REAPED_STATUS if reaped else "'settled'"
    requests, params = batch_rows(("text",), [(request_id,) for request_id in ids])
    rows = yield (
        f"UPDATE {HOLDS} SET status = {status} WHERE status = 'held'"
        f" AND request_id IN ({requests}) AND request_id BETWEEN %s AND %s"
        " RETURNING request_id, amount_micro, group_id, api_key_id,"
        " coalesce(request_key_id, api_key_id), caller_spend_id, status",
        (*params, *request_span(ids)),
        ALL,
    )
    own = moves is None
    if moves is None:
        moves = Moves()
    held = {}
    tagged = yield from tag_ledger.held_tags([row[0] for row in rows], batch_rows)
    for row in rows:
        h = Held(*row)
        if h.request_id in tagged:
            h = replace(h, tag_spends=tagged[h.request_id])
        held[h.request_id] = h
        moves.released(h)
    if own:
        yield from move_counters(moves)
    return held


# ---------------------------------------------------------------- wallet reservations


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
) -> Program[int]:
    """Hold a platform attempt's worst case on the wallet, or refuse (LM-4002).

    Taken right before the vendor call, so the reservation records the call as sent: a
    crash from here on leaves a served request, which the reaper commits.
    """
    row = yield (
        f"UPDATE {WALLETS} SET reserved_micro = reserved_micro + %s, updated_at = %s"
        f" WHERE account_id = %s AND {wallet_covers('%s')} RETURNING id",
        (amount_micro, now, account_id, amount_micro),
    )
    if row is None:
        raise Refused("wallet")
    row = yield (
        f"INSERT INTO {RESERVATIONS} ({_RESERVATION_COLUMNS})"
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


def _wallet_reserve(amount: str, *, row: str = "", source: str = "", when: str = "") -> str:
    """The CTE `wallet` moving the account's wallet reserved by `amount`, if it covers it
    (and `when` holds)."""
    return (
        f"wallet AS (UPDATE {WALLETS}{f' {row[:-1]}' if row else ''} SET reserved_micro ="
        f" {row}reserved_micro + {amount}, updated_at = %(now)s{source}"
        f" WHERE {row}account_id = %(account)s AND {wallet_covers(amount, row=row)}{when}"
        f" RETURNING {row}id)"
    )


def reserve_statement() -> str:
    """`reserve` in one statement: the wallet's compare-and-set and the reservation row
    commit together. No row back: the wallet refused."""
    return (
        f"WITH {_wallet_reserve('%(amount)s')}"
        f" INSERT INTO {RESERVATIONS} ({_RESERVATION_COLUMNS})"
        " SELECT id, %(request)s, %(group)s, %(key)s, %(attempt)s, %(amount)s, 0, 0, 'pending',"
        " TRUE, FALSE, %(now)s, %(expires)s FROM wallet RETURNING id"
    )


def reserve_many_statement() -> str:
    """`reserve` for many reservations on one wallet at once: all or none (then each on its
    own). Returns (id, request_id, attempt_no) per reservation."""
    return (
        "WITH req AS (SELECT * FROM unnest(%(requests)s::text[], %(groups)s::bigint[],"
        " %(keys)s::bigint[], %(attempts)s::int[], %(amounts)s::bigint[])"
        " AS r(request_id, group_id, api_key_id, attempt_no, amount)),"
        " tot AS (SELECT sum(amount) AS total FROM req),"
        f" {_wallet_reserve('tot.total', row='w.', source=' FROM tot')}"
        f" INSERT INTO {RESERVATIONS} ({_RESERVATION_COLUMNS})"
        " SELECT wallet.id, req.request_id, req.group_id, req.api_key_id, req.attempt_no,"
        " req.amount, 0, 0, 'pending', TRUE, FALSE, %(now)s, %(expires)s FROM req, wallet"
        " RETURNING id, request_id, attempt_no"
    )


def hold_and_reserve_statement() -> str:
    """`take_hold` (group-only) and the first platform attempt's `reserve` (attempt 1) in one
    statement: one commit, so one WAL flush, before the request's first vendor call.

    The wallet is locked before the group (the ledger's lock order). The wallet moves only
    if it covers the reservation and the group's budget, as the statement's snapshot reads
    it, has room for the hold; the group is then asked under its lock. Returns
    (reservation id, held):
    - no row: the wallet or the group refused, and nothing was taken (the escrow then asks
      for the hold alone, which says which);
    - held: both were taken;
    - not held: the group filled up between the snapshot and its lock (a concurrent hold).
      A statement cannot take back its own wallet move, so the reservation is recorded with
      no call sent and is cancelled at once (`cancel_reservation`); a gateway dying first
      leaves it to the reaper, which expires a reservation whose call was never sent.
    """
    group_room = room(amount="%(amount)s", now="%(now)s")
    has_room = f" AND EXISTS (SELECT 1 FROM {GROUPS} WHERE id = %(group)s AND {group_room})"
    return (
        f"WITH {_wallet_reserve('%(escrow)s', when=has_room)},"
        f" {_group_hold(checked=True, when=' AND EXISTS (SELECT 1 FROM wallet)')},"
        f" held AS ({_hold_row(call_sent='FALSE')} RETURNING id),"
        f" reserved AS (INSERT INTO {RESERVATIONS} ({_RESERVATION_COLUMNS})"
        " SELECT wallet.id, %(request)s, %(group)s, %(key)s, 1, %(escrow)s, 0, 0, 'pending',"
        " EXISTS (SELECT 1 FROM held), FALSE, %(now)s, %(expires)s FROM wallet"
        " RETURNING id, call_sent)"
        " SELECT id, call_sent FROM reserved"
    )


RESERVE_ONE_STATEMENT = reserve_statement()
RESERVE_MANY_STATEMENT = reserve_many_statement()
HOLD_AND_RESERVE_STATEMENT = hold_and_reserve_statement()


# wallet, kind, amount, balance after, reservation, reason, request (created_at: the statement's)
_LEDGER_ENTRY_TYPES = ("bigint", "text", "bigint", "bigint", "bigint", "text", "text")
_LEDGER_ENTRY_COLUMNS = (
    "wallet_id, kind, amount_micro, balance_after_micro, reservation_id, reason, request_id"
)


@dataclass(frozen=True, slots=True)
class Committed:
    """What committing one reservation took from its wallet, and the ledger entries that
    say so (its receipt names them)."""

    reservation_id: int
    request_id: str
    debited_micro: int  # the commit: the measured cost, at most the hold
    collected_micro: int = 0  # the excess over the hold, collected after the commit
    uncollected_micro: int = 0  # the excess the wallet could not cover
    entries: tuple[int, ...] = ()  # the commit's entry, then the excess's if one was taken

    @property
    def taken_micro(self) -> int:
        return self.debited_micro + self.collected_micro


def _insert_entries(
    entries: list[tuple], *, now: datetime
) -> Program[list[tuple[int, int | None, str]]]:
    """Insert ledger entries (rows of _LEDGER_ENTRY_TYPES); return (id, reservation id,
    request id) of each, in id order."""
    if not entries:
        return []
    source, params = batch_rows(_LEDGER_ENTRY_TYPES, entries)
    rows = yield (
        f"INSERT INTO {LEDGER_ENTRIES} ({_LEDGER_ENTRY_COLUMNS}, created_at)"
        f" SELECT *, %s FROM ({source}) AS entries RETURNING id, reservation_id, request_id",
        (now, *params),
        ALL,
    )
    return sorted(rows)


def collect_excess(
    wallet_id: int, excesses: list[tuple[int, str, int]], *, now: datetime
) -> Program[dict[int, tuple[int, int, int | None]]]:
    """Collect what committed reservations cost above their holds, once, from the wallet.

    `excesses`: (reservation id, request id, excess) of reservations this transaction just
    committed (each resolves once: its commit moved it from pending). The wallet pays each in
    order from what it has available (balance minus what other requests hold): never into a
    negative balance nor into another request's hold, so the bound below zero is 0. Each
    amount taken is one 'excess' ledger entry; what the wallet could not cover is recorded
    on the reservation as uncollected. Returns reservation id -> (collected, uncollected,
    its entry's id or None).
    """
    if not excesses:
        return {}
    row = yield (
        f"UPDATE {WALLETS} SET updated_at = %s WHERE id = %s"
        " RETURNING balance_micro, reserved_micro",
        (now, wallet_id),
    )
    balance, reserved = row
    available = max(balance - reserved, 0)
    taken: dict[int, tuple[int, int]] = {}
    for reservation_id, _, excess in excesses:
        collected = min(excess, available)
        available -= collected
        taken[reservation_id] = (collected, excess - collected)
    total = sum(collected for collected, _ in taken.values())
    if total:
        row = yield (
            f"UPDATE {WALLETS} SET balance_micro = balance_micro - %s WHERE id = %s"
            f" AND {wallet_covers('%s')} RETURNING balance_micro",
            (total, wallet_id, total),
        )
        assert row is not None, "the wallet changed under its own lock"
    entries = []
    for reservation_id, request_id, _ in excesses:
        collected = taken[reservation_id][0]
        if collected:
            balance -= collected
            entries.append(
                (
                    wallet_id, "excess", -collected, balance, None,
                    f"excess over the hold: request {request_id}", request_id,
                )
            )  # fmt: skip
    inserted = yield from _insert_entries(entries, now=now)
    entry_of = {request_id: entry_id for entry_id, _, request_id in inserted}
    source, params = batch_rows(
        ("bigint", "text", "bigint", "bigint"),
        [(r, q, *taken[r]) for r, q, _ in excesses],
    )
    yield (
        f"WITH taken (id, request_id, collected, uncollected) AS ({source})"
        f" UPDATE {RESERVATIONS} SET collected_micro = taken.collected,"
        " uncollected_micro = taken.uncollected FROM taken"
        f" WHERE {RESERVATIONS}.id = taken.id AND {RESERVATIONS}.request_id = taken.request_id"
        f" AND {RESERVATIONS}.request_id BETWEEN %s AND %s RETURNING {RESERVATIONS}.id",
        (*params, *request_span(q for _, q, _ in excesses)),
        ALL,
    )
    return {r: (*taken[r], entry_of.get(q) if taken[r][0] else None) for r, q, _ in excesses}


def commit_reservations(
    costs: dict[int, tuple[str, int]], *, now: datetime, unmeasured: bool = False
) -> Program[list[Committed]]:
    """Commit pending reservations at their cost, once; return what each took, in id order.

    `costs`: reservation id -> (its request id, measured cost). The request ids bound the
    reservation partitions the statement reads (see `request_span`).

    The wallet is debited the cost up to the hold and its hold released, one commit ledger
    entry each; a cost above the hold is then collected from what the wallet has available
    (`collect_excess`: an 'excess' entry, the rest recorded as uncollected). `unmeasured`
    marks the reaper's commits at the hold of a served request whose usage never arrived.
    A reservation resolved already (settled, cancelled, reaped) is left as it is.
    """
    if not costs:
        return []
    served, params = batch_rows(
        ("bigint", "text", "bigint"),
        sorted((id_, request_id, cost) for id_, (request_id, cost) in costs.items()),
    )
    rows = yield (
        f"WITH served (id, request_id, cost) AS ({served})"
        f" UPDATE {RESERVATIONS} SET status = 'committed',"
        " committed_micro = CASE WHEN served.cost < amount_micro THEN served.cost"
        " ELSE amount_micro END,"
        " excess_micro = CASE WHEN served.cost > amount_micro THEN served.cost - amount_micro"
        " ELSE 0 END, unmeasured = %s, resolved_at = %s"
        f" FROM served WHERE {RESERVATIONS}.id = served.id"
        f" AND {RESERVATIONS}.request_id = served.request_id"
        f" AND {RESERVATIONS}.status = 'pending'"
        f" AND {RESERVATIONS}.request_id BETWEEN %s AND %s"
        f" RETURNING {RESERVATIONS}.id, wallet_id, amount_micro, committed_micro,"
        f" {RESERVATIONS}.request_id, excess_micro",
        (*params, unmeasured, now, *request_span(r for r, _ in costs.values())),
        ALL,
    )
    wallets: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # released, debited
    by_wallet: dict[int, list[tuple[int, int, str, int]]] = defaultdict(list)
    for reservation_id, wallet_id, amount, committed, request_id, excess in sorted(rows):
        wallets[wallet_id][0] += amount
        wallets[wallet_id][1] += committed
        by_wallet[wallet_id].append((reservation_id, committed, request_id, excess))
    label = "unmeasured: request" if unmeasured else "request"
    done: list[Committed] = []
    for wallet_id, (released, debited) in sorted(wallets.items()):
        row = yield (
            f"UPDATE {WALLETS} SET reserved_micro = reserved_micro - %s,"
            " balance_micro = balance_micro - %s, updated_at = %s WHERE id = %s"
            " RETURNING balance_micro",
            (released, debited, now, wallet_id),
        )
        balance = row[0] + debited  # walk this wallet's commits in order
        commits = []
        for reservation_id, committed, request_id, _ in by_wallet[wallet_id]:
            balance -= committed
            commits.append(
                (
                    wallet_id, "commit", -committed, balance, reservation_id,
                    f"{label} {request_id}", request_id,
                )
            )  # fmt: skip
        inserted = yield from _insert_entries(commits, now=now)
        entry_of = {reservation_id: entry_id for entry_id, reservation_id, _ in inserted}
        collected = yield from collect_excess(
            wallet_id,
            [(r, q, excess) for r, _, q, excess in by_wallet[wallet_id] if excess],
            now=now,
        )
        for reservation_id, committed, request_id, _ in by_wallet[wallet_id]:
            taken, left, excess_entry = collected.get(reservation_id, (0, 0, None))
            entries = (entry_of[reservation_id],) + ((excess_entry,) if excess_entry else ())
            done.append(Committed(reservation_id, request_id, committed, taken, left, entries))
    return sorted(done, key=lambda c: c.reservation_id)


def cancel_reservation(
    reservation_id: int, *, now: datetime, status: str = "cancelled"
) -> Program[bool]:
    """Release a pending reservation at 0, once: 'cancelled' (its call failed) or 'expired'."""
    row = yield (
        f"UPDATE {RESERVATIONS} SET status = %s, committed_micro = 0, excess_micro = 0,"
        " resolved_at = %s WHERE id = %s AND status = 'pending' RETURNING wallet_id, amount_micro",
        (status, now, reservation_id),
    )
    if row is None:
        return False  # resolved already (by settle, the reaper, or a cancel)
    yield (
        f"UPDATE {WALLETS} SET reserved_micro = reserved_micro - %s, updated_at = %s"
        " WHERE id = %s RETURNING id",
        (row[1], now, row[0]),
    )
    return True


# ---------------------------------------------------------------- charges


@dataclass(frozen=True, slots=True)
class Charge:
    """What one request owes its group, key and caller: token cost and bandwidth."""

    request_id: str
    group_id: int
    api_key_id: int | None = None
    caller_spend_id: int | None = None
    cost_micro: int = 0  # the provider cost: spent and settled
    bandwidth_micro: int = 0  # the bandwidth charge: spent only, never settled
    # Measured cost the wallet could not cover: not in cost_micro, stated on the group's and
    # key's uncollected counters only.
    uncollected_micro: int = 0
    tag_spends: tuple[tag_ledger.TagSpendRef, ...] = ()  # charged as the caller is


def charge(
    charges: list[Charge], *, source: str, now: datetime, moves: Moves | None = None
) -> Program[set[str]]:
    """Charge requests once each; return the ids charged now.

    Each request's settled marker is inserted (ON CONFLICT DO NOTHING): only its inserter
    charges, so whichever of settle, the reaper and reconciliation comes first charges the
    request and the others charge nothing. Group spent += cost + bandwidth and settled +=
    cost; key and caller spent += cost + bandwidth.
    """
    if not charges:
        return set()
    owed, params = batch_rows(
        ("text", "bigint", "bigint", "bigint", "bigint"),
        [
            (c.request_id, c.group_id, c.api_key_id, c.bandwidth_micro, c.cost_micro)
            for c in charges
        ],
    )
    rows = yield (
        f"INSERT INTO {SETTLED} (request_id, group_id, api_key_id, bandwidth_micro,"
        f" provider_cost_micro, source, created_at) SELECT *, %s, %s FROM ({owed}) AS owed"
        " WHERE true ON CONFLICT (request_id) DO NOTHING RETURNING request_id",
        (source, now, *params),
        ALL,
    )
    marked = {row[0] for row in rows}
    own = moves is None
    if moves is None:
        moves = Moves()
    pending = set(marked)
    for c in charges:
        if c.request_id in pending:
            pending.discard(c.request_id)  # one charge per marker, even if listed twice
            moves.charged(c)
    if own:
        yield from move_counters(moves, now=now)
    return marked


def charge_bandwidth(
    request_id: str, *, bandwidth_micro: int, moves: Moves | None = None
) -> Program[int]:
    """Make a charged request's bandwidth `bandwidth_micro`; return the difference charged.

    The marker moves by compare-and-set on its old value; everything its charge moved moves
    by the difference (a negative one refunds an over-charge): the group and the key; and the
    caller's and the tags' spends its hold named, when the charge was made from the hold
    (settle, reaper, true-up), not by reconciliation, which charges group and key only.
    """
    while True:
        row = yield (
            "SELECT s.bandwidth_micro, s.group_id, s.api_key_id, s.source, h.caller_spend_id"
            f" FROM {SETTLED} s LEFT JOIN {HOLDS} h"
            " ON h.request_id = s.request_id AND h.request_id = %s WHERE s.request_id = %s",
            (request_id, request_id),
        )
        if row is None or row[0] == bandwidth_micro:
            return 0
        was, group_id, api_key_id, source, caller_spend_id = row
        done = yield (
            f"UPDATE {SETTLED} SET bandwidth_micro = %s"
            " WHERE request_id = %s AND bandwidth_micro = %s RETURNING id",
            (bandwidth_micro, request_id, was),
        )
        if done is not None:
            break  # else corrected concurrently: read it again
    own = moves is None
    if moves is None:
        moves = Moves()
    delta = bandwidth_micro - was
    if source == SettledRequest.Source.RECONCILE:
        charge = Charge(request_id, group_id, api_key_id)
    else:
        tagged = yield from tag_ledger.held_tags([request_id], batch_rows)
        charge = Charge(
            request_id, group_id, api_key_id, caller_spend_id, tag_spends=tagged.get(request_id, ())
        )
    moves.charged(charge, bandwidth_micro=delta)
    if own:
        yield from move_counters(moves)
    return delta


# ---------------------------------------------------------------- wallet credits


def credit_wallet(
    wallet_id: int, *, amount_micro: int, kind: str, reason: str, now: datetime, actor: str = ""
) -> Program[int]:
    """Add to (or, negative, correct) a wallet's balance with a ledger entry; return its id.

    Kinds: 'opening', 'topup', 'adjustment'. Refused if a correction would take the balance
    below what the wallet holds. `actor`: the operator who typed it, if one did.
    """
    row = yield (
        f"UPDATE {WALLETS} SET balance_micro = balance_micro + %s, updated_at = %s"
        " WHERE id = %s AND balance_micro + %s >= reserved_micro RETURNING balance_micro",
        (amount_micro, now, wallet_id, amount_micro),
    )
    if row is None:
        raise Refused("the correction would take the wallet below its holds")
    entry = yield (
        f"INSERT INTO {LEDGER_ENTRIES} (wallet_id, kind, amount_micro, balance_after_micro,"
        " reservation_id, reason, actor, created_at) VALUES (%s, %s, %s, %s, NULL, %s, %s, %s)"
        " RETURNING id",
        (wallet_id, kind, amount_micro, row[0], reason, actor, now),
    )
    return entry[0]


# ---------------------------------------------------------------- budget periods

_PERIOD_TABLES = {"group": GROUPS, "key": KEYS}
_ENDED = {
    "group": (
        f"SELECT 'group', g.id, g.budget_period, a.time_zone FROM {GROUPS} g"
        f" JOIN {ACCOUNTS} a ON a.id = g.account_id WHERE g.period_ends_at <= %s"
    ),
    "key": (
        f"SELECT 'key', k.id, k.budget_period, a.time_zone FROM {KEYS} k"
        f" JOIN {GROUPS} g ON g.id = k.group_id"
        f" JOIN {ACCOUNTS} a ON a.id = g.account_id WHERE k.period_ends_at <= %s"
    ),
}


def ended_periods(
    *,
    now: datetime,
    group_ids: Iterable[int] | None = None,
    key_ids: Iterable[int] | None = None,
    limit: int | None = None,
) -> Program[dict[tuple[str, int], tuple[str, str]]]:
    """Find the groups and keys (all, or these) whose budget period ended by `now`.

    A plain read, no lock: `_roll` checks again under the row's lock. Returns
    {("group" | "key", id): (budget_period, the account's time zone)}.
    """
    parts, params = [], []
    for table, ids in (("group", group_ids), ("key", key_ids)):
        sql, part_params = _ENDED[table], [now]
        if ids is not None:
            ids = sorted(set(ids))
            if not ids:
                continue
            source, id_params = batch_rows(("bigint",), [(i,) for i in ids])
            sql += f" AND {table[0]}.id IN ({source})"
            part_params += id_params
        parts.append(sql)
        params += part_params
    if not parts:
        return {}
    sql = " UNION ALL ".join(parts)
    if limit is not None:
        sql = f"SELECT * FROM ({sql}) AS ended LIMIT {int(limit)}"
    rows = yield (sql, tuple(params), ALL)
    return {(table, row_id): (period, tz) for table, row_id, period, tz in rows}


def _roll(table: str, row_id: int, period: str, tz_name: str, *, now: datetime) -> Program[bool]:
    """Close a group's or key's ended period: record its spent, start the current one at 0."""
    name = _PERIOD_TABLES[table]
    locked = yield (
        f"UPDATE {name} SET spent_micro = spent_micro WHERE id = %s AND period_ends_at <= %s"
        " RETURNING id",
        (row_id, now),
    )
    if locked is None:
        return False  # rolled meanwhile, or its period was changed
    group, key = ("id", "CAST(NULL AS bigint)") if table == "group" else ("group_id", "id")
    yield (
        f"INSERT INTO {PERIODS} (group_id, api_key_id, budget_period, starts_at,"
        " ends_at, budget_max_micro, spent_micro, closed_at)"
        f" SELECT {group}, {key}, budget_period, period_starts_at, period_ends_at,"
        f" budget_max_micro, spent_micro, %s FROM {name} WHERE id = %s RETURNING id",
        (now, row_id),
    )
    starts, ends = period_bounds(period, tz_name, now)
    yield (
        f"UPDATE {name} SET spent_micro = 0, period_starts_at = %s, period_ends_at = %s"
        " WHERE id = %s RETURNING id",
        (starts, ends, row_id),
    )
    return True


def roll_periods(
    *,
    now: datetime,
    group_ids: Iterable[int] | None = None,
    key_ids: Iterable[int] | None = None,
    limit: int | None = 500,
) -> Program[int]:
    """Roll every group and key (all, or these) whose budget period ended; return how many.

    Each closed period becomes a BudgetPeriod row with its exact spent and budget; spent
    starts again at 0 in the period containing `now`. Groups first, then keys, by id: the
    ledger's lock order. (Periods a row sat idle through leave no row: nothing was spent.)
    """
    ended = yield from ended_periods(now=now, group_ids=group_ids, key_ids=key_ids, limit=limit)
    rolled = 0
    for (table, row_id), (period, tz_name) in sorted(
        ended.items(), key=lambda item: (item[0][0] != "group", item[0][1])
    ):
        rolled += yield from _roll(table, row_id, period, tz_name, now=now)
    return rolled


# ---------------------------------------------------------------- spend alerts


def _alert_thresholds() -> tuple[str, str]:
    """The account's alert percents as rows (`t`), and the percent's expression: JSON array
    expansion is the one thing PostgreSQL and SQLite spell differently."""
    if connection.vendor == "postgresql":
        return (
            "CROSS JOIN LATERAL jsonb_array_elements_text(a.budget_alert_pcts) AS t(pct)",
            "CAST(t.pct AS integer)",
        )
    return "CROSS JOIN json_each(a.budget_alert_pcts) AS t", "CAST(t.value AS integer)"


def raise_alerts(
    *, group_ids: Iterable[int], key_ids: Iterable[int], now: datetime
) -> Program[list[int]]:
    """Record each alert threshold the spent of these groups and keys reached; return the
    ids of the alerts raised now.

    One statement: threshold t of the account's budget_alert_pcts is reached when
    spent * 100 >= t * budget_max (and something was spent). An alert exists once per
    (group or key, period, threshold): a later batch past the same threshold adds nothing,
    the next period raises it again.
    """
    from billing.models import NO_PERIOD

    join, pct = _alert_thresholds()
    parts, params = [], []
    for table, ids in (("group", group_ids), ("key", key_ids)):
        ids = sorted(set(ids))
        if not ids:
            continue
        source, id_params = batch_rows(("bigint",), [(i,) for i in ids])
        if table == "group":
            owner = "g.id, CAST(NULL AS bigint), 0"
            row, tables = "g", f"{GROUPS} g JOIN {ACCOUNTS} a ON a.id = g.account_id"
        else:
            owner = "k.group_id, k.id, k.id"
            row = "k"
            tables = (
                f"{KEYS} k JOIN {GROUPS} g ON g.id = k.group_id"
                f" JOIN {ACCOUNTS} a ON a.id = g.account_id"
            )
        parts.append(
            f"SELECT {owner}, {row}.period_starts_at, {row}.period_ends_at,"
            f" COALESCE({row}.period_starts_at, %s), {pct}, {row}.spent_micro,"
            f" {row}.budget_max_micro FROM {tables} {join}"
            f" WHERE {row}.id IN ({source}) AND {row}.budget_max_micro IS NOT NULL"
            f" AND {row}.spent_micro > 0"
            f" AND {row}.spent_micro * 100 >= {pct} * {row}.budget_max_micro"
            f" AND ({row}.period_ends_at IS NULL OR {row}.period_ends_at > %s)"
        )
        params += [NO_PERIOD, *id_params, now]
    if not parts:
        return []
    rows = yield (
        f"INSERT INTO {ALERTS} (group_id, api_key_id, key_scope, period_starts_at,"
        " period_ends_at, period_scope, threshold_pct, spent_micro, budget_max_micro,"
        " created_at, delivery, delivery_attempts, last_error)"
        f" SELECT *, %s, 'pending', 0, '' FROM ({' UNION ALL '.join(parts)}) AS reached"
        " WHERE true ON CONFLICT (group_id, key_scope, period_scope, threshold_pct) DO NOTHING"
        " RETURNING id",
        (now, *params),
        ALL,
    )
    return [r[0] for r in rows]


# ---------------------------------------------------------------- composites


@dataclass(frozen=True, slots=True)
class Settle:
    """What a stored usage row says its request owes."""

    request_id: str
    group_id: int | None
    api_key_id: int | None
    cost_micro: int
    bandwidth_micro: int
    reservation_id: int | None = None  # the served attempt's reservation, if it held one


@dataclass(frozen=True, slots=True)
class TrueUp:
    """A request charged at its hold by the reaper, corrected now that its row arrived."""

    cost_micro: int  # what its settled cost moved by (negative: refunded)
    bandwidth_micro: int  # what its bandwidth charge moved by
    wallet_micro: int  # what its wallet got back
    charged_before_micro: int  # what the reaper had charged its settled cost
    counters: bool  # the reaper had charged its counters (else only its wallet: it is
    # charged as any stored row is)


@dataclass
class WalletMoved:
    """What settling one request moved on its wallet: the ledger entries and their sum."""

    entries: list[int] = field(default_factory=list)
    taken_micro: int = 0  # taken from the wallet (negative: given back)
    uncollected_micro: int = 0  # measured above the hold that the wallet could not cover

    def took(self, c: Committed) -> None:
        self.entries += c.entries
        self.taken_micro += c.taken_micro
        self.uncollected_micro += c.uncollected_micro


@dataclass(frozen=True, slots=True)
class Settled:
    """What a settled batch did to each request: charged now, or trued up, and what each
    request's wallet paid (requests without a wallet move are absent from `wallet`)."""

    charged: set[str]
    trued_up: dict[str, TrueUp]
    wallet: dict[str, WalletMoved] = field(default_factory=dict)

    def uncollected_micro(self, request_id: str) -> int:
        moved = self.wallet.get(request_id)
        return moved.uncollected_micro if moved else 0


def settle(rows: list[Settle], *, now: datetime) -> Program[Settled]:
    """Apply the money of a batch of stored usage rows, each once.

    The served reservations are committed at measured cost (the excess over a hold collected
    as far as the wallet covers it), the requests' budget holds released, each request owing
    something charged (its caller through its hold) with what its wallet could not pay left
    out: the batch's counters move once per group, key and caller. A request the reaper
    charged at its hold before its row arrived is trued up to the row's measured cost
    (`true_up`).
    """
    if not rows:
        return Settled(set(), {})
    wallet: dict[str, WalletMoved] = defaultdict(WalletMoved)
    committed = yield from commit_reservations(
        {
            r.reservation_id: (r.request_id, r.cost_micro)
            for r in rows
            if r.reservation_id is not None
        },
        now=now,
    )
    for c in committed:
        wallet[c.request_id].took(c)
    moves = Moves()
    held = yield from release_holds([r.request_id for r in rows], moves=moves)
    trued = yield from true_up(rows, now=now, moves=moves, wallet=wallet)
    owing = []
    for r in rows:
        if (r.cost_micro or r.bandwidth_micro) and not (
            r.request_id in trued and trued[r.request_id].counters
        ):
            # Only a request with a principal owes (gateway/recording.py: no principal, no
            # platform call and no bandwidth charge), so an owing row has its group.
            assert r.group_id is not None
            h = held.get(r.request_id)
            moved = wallet.get(r.request_id)
            owing.append(
                Charge(
                    r.request_id,
                    r.group_id,
                    r.api_key_id,
                    h.caller_spend_id if h else None,
                    # Counters state what was taken: not what the wallet could not pay,
                    # which they state on its own.
                    r.cost_micro - (moved.uncollected_micro if moved else 0),
                    r.bandwidth_micro,
                    moved.uncollected_micro if moved else 0,
                    h.tag_spends if h else (),
                )
            )
    charged = yield from charge(owing, source="settle", now=now, moves=moves)
    yield from move_counters(moves, now=now)
    yield from raise_alerts(
        group_ids={c.group_id for c in owing if c.group_id is not None},
        key_ids={c.api_key_id for c in owing if c.api_key_id is not None},
        now=now,
    )
    return Settled(charged, trued, dict(wallet))


def true_up(
    rows: list[Settle],
    *,
    now: datetime,
    moves: Moves,
    wallet: dict[str, WalletMoved] | None = None,
) -> Program[dict[str, TrueUp]]:
    """Correct what the reaper charged at the hold to what the late rows measured, once.

    Two halves, each resolved once by its own flag: the reservations it committed unmeasured
    (committed again at the measured cost, as a settle would have: the difference given back
    to the wallet with one 'trueup' ledger entry, or a cost above the hold collected as
    `collect_excess` does) and the settled marker the reaper wrote (source 'reaper' ->
    'trueup', its group, key and caller counters moved by the difference to what was
    taken). The reaper may have done either half before the row arrived, or both. `wallet`
    gathers each request's wallet moves and entries.
    """
    if wallet is None:
        wallet = defaultdict(WalletMoved)
    by_id = {r.request_id: r for r in rows}
    ids = sorted(by_id)
    wanted, params = batch_rows(("text",), [(i,) for i in ids])
    lock = " FOR UPDATE OF s" if connection.vendor == "postgresql" else ""
    markers = yield (
        "SELECT s.request_id, s.provider_cost_micro, s.bandwidth_micro, s.group_id,"
        f" s.api_key_id, h.caller_spend_id FROM {SETTLED} s"
        f" LEFT JOIN {HOLDS} h ON h.request_id = s.request_id"
        f" WHERE s.source = 'reaper' AND s.request_id IN (SELECT * FROM ({wanted}) AS w)"
        f" AND s.request_id BETWEEN %s AND %s{lock}",
        (*params, *request_span(ids)),
        ALL,
    )
    lock = " FOR UPDATE" if connection.vendor == "postgresql" else ""
    reaped = yield (
        f"SELECT id, request_id, wallet_id, amount_micro, committed_micro FROM {RESERVATIONS}"
        f" WHERE status = 'committed' AND unmeasured"
        f" AND request_id IN (SELECT * FROM ({wanted}) AS w)"
        f" AND request_id BETWEEN %s AND %s ORDER BY id{lock}",
        (*params, *request_span(ids)),
        ALL,
    )
    if not markers and not reaped:
        return {}
    returned: dict[str, int] = defaultdict(int)
    for reservation_id, request_id, wallet_id, amount, committed in reaped:
        r = by_id[request_id]
        measured = r.cost_micro if reservation_id == r.reservation_id else 0
        now_committed = min(measured, amount)
        excess = max(measured - amount, 0)
        yield (
            f"UPDATE {RESERVATIONS} SET committed_micro = %s, excess_micro = %s,"
            " unmeasured = false WHERE id = %s AND request_id = %s RETURNING id",
            (now_committed, excess, reservation_id, request_id),
        )
        back = committed - now_committed
        returned[request_id] += back
        if back:
            balance = yield (
                f"UPDATE {WALLETS} SET balance_micro = balance_micro + %s, updated_at = %s"
                " WHERE id = %s RETURNING balance_micro",
                (back, now, wallet_id),
            )
            [(entry_id, _, _)] = yield from _insert_entries(
                [
                    (
                        wallet_id, "trueup", back, balance[0], None,
                        f"trueup: request {request_id}", request_id,
                    )
                ],
                now=now,
            )  # fmt: skip
            wallet[request_id].took(Committed(reservation_id, request_id, -back, 0, 0, (entry_id,)))
        if excess:
            collected = yield from collect_excess(
                wallet_id, [(reservation_id, request_id, excess)], now=now
            )
            taken, left, excess_entry = collected[reservation_id]
            wallet[request_id].took(
                Committed(
                    reservation_id,
                    request_id,
                    0,
                    taken,
                    left,
                    (excess_entry,) if excess_entry else (),
                )
            )
    counters: dict[str, tuple[int, int, int]] = {}
    tagged = yield from tag_ledger.held_tags([m[0] for m in markers], batch_rows)
    for request_id, cost, bandwidth, group_id, api_key_id, caller_spend_id in markers:
        r = by_id[request_id]
        moved = wallet.get(request_id)
        taken_cost = r.cost_micro - (moved.uncollected_micro if moved else 0)
        yield (
            f"UPDATE {SETTLED} SET source = 'trueup', provider_cost_micro = %s,"
            " bandwidth_micro = %s WHERE request_id = %s AND source = 'reaper' RETURNING id",
            (taken_cost, r.bandwidth_micro, request_id),
        )
        # The reaper charged the hold, all of it taken: what this true-up could not collect
        # is all of the request's uncollected.
        difference = Charge(
            request_id,
            group_id,
            api_key_id,
            caller_spend_id,
            taken_cost - cost,
            r.bandwidth_micro - bandwidth,
            moved.uncollected_micro if moved else 0,
            tagged.get(request_id, ()),
        )
        moves.charged(difference)
        counters[request_id] = (difference.cost_micro, difference.bandwidth_micro, cost)
    return {
        request_id: TrueUp(
            cost_micro=counters.get(request_id, (0, 0, 0))[0],
            bandwidth_micro=counters.get(request_id, (0, 0, 0))[1],
            wallet_micro=returned.get(request_id, 0),
            charged_before_micro=counters.get(request_id, (0, 0, 0))[2],
            counters=request_id in counters,
        )
        for request_id in sorted(set(counters) | set(returned))
    }


def reap_reservation(reservation_id: int, *, now: datetime) -> Program[bool]:
    """Resolve an expired reservation: committed at the hold if its call was sent, else expired.

    A sent call whose usage never arrived was served by a gateway that died: the wallet is
    debited the hold, marked unmeasured for reconciliation. A request that took no budget
    hold is charged to its group's and key's counters here too (raising the spend alerts a
    settled row would); one with a hold is charged with it.
    """
    row = yield (
        "SELECT call_sent, amount_micro, request_id, group_id, api_key_id"
        f" FROM {RESERVATIONS} WHERE id = %s AND status = 'pending'",
        (reservation_id,),
    )
    if row is None:
        return False  # resolved already (by settle, a cancel, or another reaper)
    sent, amount, request_id, group_id, api_key_id = row
    if not sent:
        return (yield from cancel_reservation(reservation_id, now=now, status="expired"))
    committed = yield from commit_reservations(
        {reservation_id: (request_id, amount)}, now=now, unmeasured=True
    )
    if not committed:
        return False
    hold = yield (f"SELECT id FROM {HOLDS} WHERE request_id = %s", (request_id,))
    if hold is None and group_id is not None:
        charged = yield from charge(
            [Charge(request_id, group_id, api_key_id, cost_micro=amount)], source="reaper", now=now
        )
        if charged:
            yield from raise_alerts(
                group_ids=[group_id], key_ids=[] if api_key_id is None else [api_key_id], now=now
            )
    return True


def reap_hold(request_id: str, *, now: datetime) -> Program[bool]:
    """Resolve an expired budget hold: charged if a platform call was sent, else released at 0.

    The charge is the hold (the request's worst case), unmeasured, to the counters its usage
    row would have charged: the group, the request's key (the hold names it, budgeted or
    not) and the caller it held on; and the spend alerts that charge reached are raised.
    """
    moves = Moves()
    held = yield from release_holds([request_id], reaped=True, moves=moves)
    if not held:
        return False
    h = held[request_id]
    charged: set[str] = set()
    if h.status == "charged":
        charged = yield from charge(
            [
                Charge(
                    request_id,
                    h.group_id,
                    h.request_key_id,
                    h.caller_spend_id,
                    h.amount_micro,
                    tag_spends=h.tag_spends,
                )
            ],  # fmt: skip
            source="reaper",
            now=now,
            moves=moves,
        )
    yield from move_counters(moves, now=now)
    if charged:  # the alerts a settled row's charge would raise (`settle`)
        yield from raise_alerts(
            group_ids=[h.group_id],
            key_ids=[] if h.request_key_id is None else [h.request_key_id],
            now=now,
        )
    return True


# ---------------------------------------------------------------- what a refusal says


# A refused reservation's one read: what the wallet has available.
WALLET_AVAILABLE_READ = (
    f"SELECT balance_micro - reserved_micro FROM {WALLETS} WHERE account_id = %(account)s"
)
# A refused hold's one read: when the refusing budget's period resets.
BUDGET_RESET_READS = {
    "group budget": f"SELECT budget_period, period_ends_at FROM {GROUPS} WHERE id = %(id)s",
    "key budget": f"SELECT budget_period, period_ends_at FROM {KEYS} WHERE id = %(id)s",
}
