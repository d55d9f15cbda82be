"""Tag budgets' part of the ledger (billing/ledger/): a request's hold on each budgeted tag.

A request whose tags include budgeted ones (billing.models.TagBudget) holds its worst case on
each such tag's TagSpend row of the current period, with its group, key and caller hold and
in the same transaction (`take_hold`); a tag with no room refuses the whole hold (LM-4001
naming the tag). Each tag held is one SpendHoldTag row beside the request's SpendHold, so the
hold's one release (settle, reaper) releases every tag it held and charges each the measured
cost plus bandwidth, as a caller's hold is. A new period is a new TagSpend row (its key is the
period: accounts/periods.period_key), created on first use: nothing to roll.

Lock order: tag spends come after caller spends, and among themselves by (tag, period, id),
in holds and in counter moves alike (`TagSpendRef` sorts so), so concurrent programs wait,
never deadlock. Statements are portable (PostgreSQL and SQLite), as the ledger's are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from accounts.periods import NONE, period_bounds
from billing.ledger.sql import batch_rows
from billing.models import SpendHoldTag, TagSpend
from core.sqlexec import ALL, Program

TAG_SPENDS = TagSpend._meta.db_table
TAG_HOLDS = SpendHoldTag._meta.db_table
REFUSED_PREFIX = "tag budget "


@dataclass(frozen=True, slots=True, order=True)
class TagHold:
    """One budgeted tag a request holds on: its TagSpend row is (account, tag, period)."""

    tag: str
    period: str  # the period's key: "2026-12-06", "2026-12" or "all"
    account_id: int
    budget_max_micro: int
    budget_period: str = NONE  # for the refusal's "resets at"
    time_zone: str = "UTC"


# A tag spend row a hold named, as (tag, period, id): the sort key of the lock order.
TagSpendRef = tuple[str, str, int]


def refused(tag: str) -> str:
    """What a Refused says for a tag without room (escrow turns it into LM-4001's message)."""
    return f"{REFUSED_PREFIX}{tag!r}"


def hold_tags(tags: Iterable[TagHold], amount: int, *, check: str) -> Program[tuple | str]:
    """Reserve `amount` on each tag's spend of its period, created on first use; return the
    rows held, or the refusing tag's `refused` text (the caller raises, rolling back).

    `check`: the ledger's room check with parameters (amount, budget, budget), as a caller
    budget's (`ledger.room(budget=...)`): refused once spent + reserved reached the budget,
    even for a zero hold, or when the hold would pass it.
    """
    held: list[TagSpendRef] = []
    for t in sorted(tags):
        yield (
            f"INSERT INTO {TAG_SPENDS} (account_id, tag, period, spent_micro, reserved_micro)"
            " VALUES (%s, %s, %s, 0, 0)"
            " ON CONFLICT (account_id, tag, period) DO NOTHING RETURNING id",
            (t.account_id, t.tag, t.period),
        )
        row = yield (
            f"UPDATE {TAG_SPENDS} SET reserved_micro = reserved_micro + %s"
            f" WHERE account_id = %s AND tag = %s AND period = %s AND {check} RETURNING id",
            (amount, t.account_id, t.tag, t.period, t.budget_max_micro, t.budget_max_micro, amount),
        )
        if row is None:
            return refused(t.tag)
        held.append((t.tag, t.period, row[0]))
    return tuple(held)


def record_tag_holds(request_id: str, held: tuple[TagSpendRef, ...]) -> Program[None]:
    """Name the request's tag spends beside its hold row (one row each)."""
    for _, _, spend_id in held:
        yield (
            f"INSERT INTO {TAG_HOLDS} (request_id, tag_spend_id) VALUES (%s, %s) RETURNING id",
            (request_id, spend_id),
        )


def held_tags(request_ids: list[str]) -> Program[dict[str, tuple[TagSpendRef, ...]]]:
    """The tag spends each request held on (requests without tag holds are absent)."""
    if not request_ids:
        return {}
    requests, params = batch_rows(("text",), [(r,) for r in request_ids])
    rows = yield (
        f"SELECT h.request_id, s.tag, s.period, s.id FROM {TAG_HOLDS} h"
        f" JOIN {TAG_SPENDS} s ON s.id = h.tag_spend_id"
        f" WHERE h.request_id IN (SELECT * FROM ({requests}) AS r)",
        params,
        ALL,
    )
    found: dict[str, list[TagSpendRef]] = {}
    for request_id, tag, period, spend_id in rows:
        found.setdefault(request_id, []).append((tag, period, spend_id))
    return {request_id: tuple(sorted(refs)) for request_id, refs in found.items()}


def move_tag_counters(tags: Mapping[TagSpendRef, list[int]]) -> Program[None]:
    """Apply a transaction's tag spend moves ([spent, reserved] per row), in lock order."""
    for (_, _, spend_id), (spent, reserved) in sorted(tags.items()):
        if spent or reserved:
            yield (
                f"UPDATE {TAG_SPENDS} SET spent_micro = spent_micro + %s,"
                " reserved_micro = reserved_micro + %s WHERE id = %s RETURNING id",
                (spent, reserved, spend_id),
            )


def refusal_message(tags: Iterable[TagHold], refusal: str, *, now: datetime) -> str | None:
    """LM-4001's message for a tag's refusal (None: not a tag's): it names the tag, and when
    its budget has a period, when that resets."""
    if not refusal.startswith(REFUSED_PREFIX):
        return None
    for t in tags:
        if refused(t.tag) == refusal:
            resets = ""
            if t.budget_period != NONE:
                ends = period_bounds(t.budget_period, t.time_zone, now)[1]
                resets = f"; this {t.budget_period} budget resets at {ends.isoformat()}"
            return f"Budget exhausted: tag {t.tag!r} has used its budget{resets}."
    return f"Budget exhausted ({refusal})."
