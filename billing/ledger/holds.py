"""Budget holds: a request's worst case held on its group, key, caller and tags (`take_hold`),
marked sent before a platform call, and released once (`release_holds`), settled or reaped."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from billing import tag_ledger
from billing.ledger.counters import Moves, move_counters
from billing.ledger.sql import (
    BUDGET_ROOM,
    CALLER_SPENDS,
    GROUPS,
    HOLD_COLUMNS,
    HOLDS,
    KEYS,
    RESERVATIONS,
    ROOM,
    Refused,
    batch_rows,
    request_span,
)
from core.sqlexec import ALL, Program


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
            f" AND {BUDGET_ROOM} RETURNING id",
            (amount, c.group_id, c.label, c.period, c.budget_max_micro, c.budget_max_micro, amount),
        )
        if row is None:
            raise Refused("caller budget")
        caller_spend_id = row[0]
    tags = yield from tag_ledger.hold_tags(h.tags, amount, check=BUDGET_ROOM)
    if isinstance(tags, str):
        raise Refused(tags)
    yield from tag_ledger.record_tag_holds(h.request_id, tags)
    yield (
        f"INSERT INTO {HOLDS} ({HOLD_COLUMNS})"
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
    tagged = yield from tag_ledger.held_tags([row[0] for row in rows])
    for row in rows:
        h = Held(*row)
        if h.request_id in tagged:
            h = replace(h, tag_spends=tagged[h.request_id])
        held[h.request_id] = h
        moves.released(h)
    if own:
        yield from move_counters(moves)
    return held


# A refused hold's one read: when the refusing budget's period resets.
BUDGET_RESET_READS = {
    "group budget": f"SELECT budget_period, period_ends_at FROM {GROUPS} WHERE id = %(id)s",
    "key budget": f"SELECT budget_period, period_ends_at FROM {KEYS} WHERE id = %(id)s",
}
