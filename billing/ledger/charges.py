"""Charges: what a request owes its group, key, caller and tags, charged once by whoever
inserts its settled marker (`charge`), and a charged request's bandwidth corrected by the
difference (`charge_bandwidth`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from billing import tag_ledger
from billing.ledger.counters import Moves, move_counters
from billing.ledger.sql import HOLDS, SETTLED, batch_rows
from billing.models import SettledRequest
from core.sqlexec import ALL, Program


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
        tagged = yield from tag_ledger.held_tags([request_id])
        charge = Charge(
            request_id, group_id, api_key_id, caller_spend_id, tag_spends=tagged.get(request_id, ())
        )
    moves.charged(charge, bandwidth_micro=delta)
    if own:
        yield from move_counters(moves)
    return delta
