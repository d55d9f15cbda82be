"""The counters a transaction moves on groups, keys, callers and tags (`Moves`), applied once
per row in the ledger's lock order (`move_counters`), rolling an ended budget period first."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from billing import tag_ledger
from billing.ledger.periods import ended_periods, roll_period
from billing.ledger.sql import CALLER_SPENDS, GROUPS, KEYS
from core.money import spend_micro
from core.sqlexec import Program

if TYPE_CHECKING:
    from billing.ledger.charges import Charge
    from billing.ledger.holds import Held


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
            yield from roll_period("group", group_id, *ended["group", group_id], now=now)
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
            yield from roll_period("key", key_id, *ended["key", key_id], now=now)
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
