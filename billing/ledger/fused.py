"""The request path's fused forms of `take_hold` and `reserve`: each step's compare-and-set and
its row in one statement (PostgreSQL's data-modifying CTE), so they commit together, in one
round trip. Built from the same checks and rows as the programs in holds.py and wallet.py."""

from __future__ import annotations

from dataclasses import dataclass

from billing.ledger.sql import (
    GROUPS,
    HOLD_COLUMNS,
    HOLDS,
    RESERVATION_COLUMNS,
    RESERVATIONS,
    WALLETS,
    room,
    wallet_covers,
)


@dataclass(frozen=True, slots=True)
class FirstReservation:
    """A request's first platform attempt's wallet reservation (attempt 1), asked for with
    its budget hold (`HOLD_AND_RESERVE_STATEMENT`)."""

    account_id: int
    api_key_id: int | None
    amount_micro: int


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
        f"INSERT INTO {HOLDS} ({HOLD_COLUMNS}) SELECT %(request)s, {source}.id, NULL, %(key)s,"
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
        f" INSERT INTO {HOLDS} ({HOLD_COLUMNS})"
        " SELECT req.request_id, grp.id, NULL, req.key_id, NULL, req.amount, 'held', FALSE,"
        " %(now)s, %(expires)s FROM req, grp RETURNING request_id"
    )


HOLD_ONE_STATEMENT = take_hold_statement()
HOLD_MANY_STATEMENT = take_holds_statement()
SENT_HOLD_ONE_STATEMENT = take_hold_statement(call_sent=True)


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
        f" INSERT INTO {RESERVATIONS} ({RESERVATION_COLUMNS})"
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
        f" INSERT INTO {RESERVATIONS} ({RESERVATION_COLUMNS})"
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
        f" reserved AS (INSERT INTO {RESERVATIONS} ({RESERVATION_COLUMNS})"
        " SELECT wallet.id, %(request)s, %(group)s, %(key)s, 1, %(escrow)s, 0, 0, 'pending',"
        " EXISTS (SELECT 1 FROM held), FALSE, %(now)s, %(expires)s FROM wallet"
        " RETURNING id, call_sent)"
        " SELECT id, call_sent FROM reserved"
    )


RESERVE_ONE_STATEMENT = reserve_statement()
RESERVE_MANY_STATEMENT = reserve_many_statement()
HOLD_AND_RESERVE_STATEMENT = hold_and_reserve_statement()
