"""Settle finished requests in batches, in the transaction that stores their usage rows.

A usage row says everything a request owes: its platform cost, its bandwidth charge, the
reservation its served attempt held. Gateways journal the row before the client sees the
end of its answer; the writer that stores a batch of rows applies their money in the same
transaction, so a stored row and its settlement never exist one without the other:

- a settled-request marker per charged request (INSERT ... ON CONFLICT DO NOTHING): only
  the inserter charges, so a replayed row or a late reconciliation never charges twice;
- budget holds of the batch released, group / key / caller counters moved once per row
  owner (spent += cost + bandwidth, settled += cost, reserved -= hold);
- each served reservation committed at measured cost (capped at the hold, the excess
  recorded), wallets moved once each, one ledger entry per commit.

Until a row is stored its hold and reservation stay in place: budget and wallet checks only
ever see more held than will be spent, never less. Holds whose row never arrives (a gateway
died before journaling) are released by the reaper.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db import connection

SERVED = "ok"


def served_reservation(row: dict) -> int | None:
    """Return the reservation of the attempt that served the answer, if it held one."""
    for attempt in row.get("attempts") or ():
        if attempt.get("outcome") == SERVED and attempt.get("reservation_id"):
            return attempt["reservation_id"]
    return None


def _placeholders(count: int, width: int) -> str:
    one = "(" + ", ".join(["%s"] * width) + ")"
    return ", ".join([one] * count)


def settle_rows(rows: list[dict], *, now: datetime) -> None:
    """Apply the money of freshly stored usage rows (call inside their transaction)."""
    if not rows:
        return
    with connection.cursor() as cursor:
        charged = _mark(cursor, rows, now)
        holds = _release_holds(cursor, [row["request_id"] for row in rows])
        _move_counters(cursor, rows, charged, holds)
        _commit_reservations(cursor, rows, now)


def _mark(cursor, rows: list[dict], now: datetime) -> set[str]:
    owing = [r for r in rows if r["provider_cost_micro"] or r["bandwidth_charge_micro"]]
    if not owing:
        return set()
    params: list = []
    for r in owing:
        params += [
            r["request_id"],
            r["group_id"],
            r["api_key_id"],
            r["bandwidth_charge_micro"],
            r["provider_cost_micro"],
            "settle",
            now,
        ]
    cursor.execute(
        "INSERT INTO billing_settledrequest (request_id, group_id, api_key_id, bandwidth_micro,"
        f" provider_cost_micro, source, created_at) VALUES {_placeholders(len(owing), 7)}"
        " ON CONFLICT (request_id) DO NOTHING RETURNING request_id",
        params,
    )
    return {found[0] for found in cursor.fetchall()}


def _release_holds(cursor, request_ids: list[str]) -> dict[str, tuple]:
    marks = ", ".join(["%s"] * len(request_ids))
    cursor.execute(
        "UPDATE billing_spendhold SET status = 'settled'"
        f" WHERE status = 'held' AND request_id IN ({marks})"
        " RETURNING request_id, amount_micro, api_key_id, caller_spend_id",
        request_ids,
    )
    return {found[0]: found[1:] for found in cursor.fetchall()}


def _move_counters(cursor, rows: list[dict], charged: set[str], holds: dict) -> None:
    groups: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])  # spent, settled, released
    keys: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # spent, released
    callers: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # spent, released
    for r in rows:
        rid = r["request_id"]
        spent = r["provider_cost_micro"] + r["bandwidth_charge_micro"] if rid in charged else 0
        settled = r["provider_cost_micro"] if rid in charged else 0
        held, held_key, caller_spend = holds.get(rid, (0, None, None))
        if r["group_id"] is not None and (spent or held):
            g = groups[r["group_id"]]
            g[0] += spent
            g[1] += settled
            g[2] += held
        if r["api_key_id"] is not None and (spent or held_key is not None):
            k = keys[r["api_key_id"]]
            k[0] += spent
            k[1] += held if held_key is not None else 0
        if caller_spend is not None:
            c = callers[caller_spend]
            c[0] += spent
            c[1] += held
    for group_id, (spent, settled, released) in sorted(groups.items()):
        cursor.execute(
            "UPDATE accounts_group SET spent_micro = spent_micro + %s,"
            " settled_micro = settled_micro + %s, reserved_micro = reserved_micro - %s"
            " WHERE id = %s",
            [spent, settled, released, group_id],
        )
    for key_id, (spent, released) in sorted(keys.items()):
        cursor.execute(
            "UPDATE accounts_apikey SET spent_micro = spent_micro + %s,"
            " reserved_micro = reserved_micro - %s WHERE id = %s",
            [spent, released, key_id],
        )
    for caller_spend_id, (spent, released) in sorted(callers.items()):
        cursor.execute(
            "UPDATE billing_callerspend SET spent_micro = spent_micro + %s,"
            " reserved_micro = reserved_micro - %s WHERE id = %s",
            [spent, released, caller_spend_id],
        )


def _commit_reservations(cursor, rows: list[dict], now: datetime) -> None:
    served = {}  # reservation id -> (cost, request id)
    for r in rows:
        reservation_id = served_reservation(r)
        if reservation_id is not None:
            served[reservation_id] = (r["provider_cost_micro"], r["request_id"])
    if not served:
        return
    params: list = []
    for reservation_id, (cost, _) in served.items():
        params += [reservation_id, cost]
    cursor.execute(
        f"WITH served (id, cost) AS (VALUES {_placeholders(len(served), 2)})"
        " UPDATE billing_reservation SET status = 'committed',"
        " committed_micro = CASE WHEN served.cost < amount_micro THEN served.cost"
        " ELSE amount_micro END,"
        " excess_micro = CASE WHEN served.cost > amount_micro THEN served.cost - amount_micro"
        " ELSE 0 END, resolved_at = %s"
        " FROM served WHERE billing_reservation.id = served.id"
        " AND billing_reservation.status = 'pending'"
        " RETURNING billing_reservation.id, wallet_id, amount_micro, committed_micro",
        [*params, now],
    )
    wallets: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # released, debited
    entries: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    # Resolved ones (by the reaper, or a replay) are simply not returned.
    for reservation_id, wallet_id, amount, committed in sorted(cursor.fetchall()):
        wallets[wallet_id][0] += amount
        wallets[wallet_id][1] += committed
        entries[wallet_id].append((reservation_id, committed, served[reservation_id][1]))
    for wallet_id, (released, debited) in sorted(wallets.items()):
        cursor.execute(
            "UPDATE billing_wallet SET reserved_micro = reserved_micro - %s,"
            " balance_micro = balance_micro - %s, updated_at = %s WHERE id = %s"
            " RETURNING balance_micro",
            [released, debited, now, wallet_id],
        )
        balance = cursor.fetchone()[0] + debited  # walk the batch's commits in order
        params = []
        for reservation_id, committed, request_id in entries[wallet_id]:
            balance -= committed
            params += [
                wallet_id,
                "commit",
                -committed,
                balance,
                reservation_id,
                f"request {request_id}",
                now,
            ]
        cursor.execute(
            "INSERT INTO billing_ledgerentry (wallet_id, kind, amount_micro,"
            " balance_after_micro, reservation_id, reason, created_at)"
            f" VALUES {_placeholders(len(entries[wallet_id]), 7)}",
            params,
        )
