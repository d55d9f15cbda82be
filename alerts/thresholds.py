"""When a rule's threshold is reached, and which period it belongs to: pure functions, no
database (tests/unit/alerts)."""

from __future__ import annotations

from collections.abc import Sequence

BACKOFF_MAX_S = 3600


def reached(
    *, spent_micro: int, budget_micro: int | None, pcts: Sequence[int], amount_micro: int | None
) -> list[tuple[str, int | None]]:
    """Return the thresholds `spent_micro` has reached as (key, limit): an amount when one is
    set, else each percent of the budget (as billing.ledger.periods.raise_alerts reads them: spent *
    100 >= pct * budget, and something was spent)."""
    if spent_micro <= 0:
        return []
    if amount_micro is not None:
        return [(f"amount:{amount_micro}", amount_micro)] if spent_micro >= amount_micro else []
    if not budget_micro:
        return []
    return [
        (f"pct:{pct}", budget_micro)
        for pct in sorted(pcts)
        if spent_micro * 100 >= pct * budget_micro
    ]


def wallet_step(*, balance_micro: int, floor_micro: int, armed: bool) -> tuple[bool, bool]:
    """Return (fire, armed after) for a wallet rule: it fires once when the balance goes
    below the floor and is armed again only when the balance is back at or above it."""
    below = balance_micro < floor_micro
    if below and armed:
        return True, False
    return False, armed or not below


def backoff_s(attempts: int, *, base_s: int) -> int:
    """Return the wait after `attempts` failed tries: base, 2x base, 4x base... up to 1 h."""
    return min(BACKOFF_MAX_S, base_s * 2 ** max(0, attempts - 1))
