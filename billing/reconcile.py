"""Bandwidth reconciliation: correct the counters to what stored usage rows say.

A usage row is settled in the transaction that stores it (billing/settlement.py): its
settled-request marker is inserted and the counters move by what the row says; whoever
inserts a request's marker charges it, nobody charges it again. Reconciliation is handed,
per window, the rows whose marker is missing or disagrees (usage walks the windows and reads
its rows through billing.feed; billing never reads usage): a charged row without a marker
(stored by a path that did not settle: an older release during a rolling deploy, an import,
a bug) is charged now, token cost included (billing.ledger.charges.charge); a marker whose bandwidth
disagrees with its row is corrected by the difference (billing.ledger.charges.charge_bandwidth).
Both decide under their own compare-and-set, so a row handed in needlessly, or twice,
changes nothing. Each group's correction is one transaction with one SpendAdjustment row
recording it; the drift of a run is set on core.metrics.RECONCILE_DRIFT.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from accounts.models import Group
from billing import receipts
from billing.feed import LoggedCharge, usage_feed
from billing.ledger.charges import Charge, charge, charge_bandwidth
from billing.ledger.counters import Moves, move_counters
from billing.models import Receipt, SettledRequest, SpendAdjustment
from core import metrics
from core.money import spend_micro
from core.sqlexec import Program, run_sync

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Drift:
    """What one group's counters missed (positive) or over-charged in one window."""

    window_start: datetime
    group_id: int
    logged_micro: int  # the bandwidth the window's usage rows say was charged
    charged_micro: int  # the bandwidth the counters had before the correction
    requests: int  # requests corrected
    unsettled_cost_micro: int = 0  # token cost of never-settled requests, charged with them

    @property
    def amount_micro(self) -> int:
        """The bandwidth drift."""
        return self.logged_micro - self.charged_micro

    @property
    def spent_micro(self) -> int:
        """What the correction added to the group's spent."""
        return spend_micro(cost_micro=self.unsettled_cost_micro, bandwidth_micro=self.amount_micro)


def _correct(rows: list[LoggedCharge], *, now: datetime) -> Program:
    """Charge the unmarked rows, correct the marked ones; return (bandwidth, cost, requests)."""
    moves = Moves()
    charged = yield from charge(
        [
            Charge(
                r.request_id,
                r.group_id,
                r.api_key_id,
                cost_micro=r.cost_micro,
                bandwidth_micro=r.bandwidth_micro,
            )
            for r in rows
            if r.marked_bandwidth_micro is None
        ],
        source=SettledRequest.Source.RECONCILE,
        now=now,
        moves=moves,
    )
    bandwidth = cost = corrected = 0
    bandwidth_moved: dict[str, int] = {}
    for r in rows:
        if r.request_id in charged:
            bandwidth, cost, corrected = (
                bandwidth + r.bandwidth_micro,
                cost + r.cost_micro,
                corrected + 1,
            )
            continue
        # Settled meanwhile, or settled with a different bandwidth charge.
        delta = yield from charge_bandwidth(
            r.request_id, bandwidth_micro=r.bandwidth_micro, moves=moves
        )
        bandwidth_moved[r.request_id] = delta
        bandwidth, corrected = bandwidth + delta, corrected + bool(delta)
    yield from move_counters(moves)
    yield from _receipts(rows, charged, bandwidth_moved, now=now)
    return bandwidth, cost, corrected


def _receipts(
    rows: list[LoggedCharge], charged: set[str], bandwidth_moved: dict[str, int], *, now: datetime
) -> Program:
    """The receipts of what reconciliation charged, in its transaction (billing/receipts.py)."""
    owed = {
        r.request_id: (
            (r.cost_micro, r.bandwidth_micro)
            if r.request_id in charged
            else (0, bandwidth_moved.get(r.request_id, 0))
        )
        for r in rows
    }
    proven = [r for r in rows if any(owed[r.request_id])]
    if not proven:
        return None
    accounts = yield from receipts.accounts_of_groups(r.group_id for r in proven)
    yield from receipts.append(
        [
            receipts.Draft(
                account_id=accounts[r.group_id],
                request_id=r.request_id,
                kind=Receipt.Kind.CORRECTION,
                group_id=r.group_id,
                api_key_id=r.api_key_id,
                cost_micro=owed[r.request_id][0],
                bandwidth_micro=owed[r.request_id][1],
                detail={
                    "reason": (
                        "stored without its charge: charged by reconciliation"
                        if r.request_id in charged
                        else "bandwidth charge corrected to what its usage row says"
                    ),
                },
            )
            for r in proven
        ],
        now=now,
    )
    return None


def reconcile_window(
    *,
    window_start: datetime,
    rows: Iterable[LoggedCharge],
    logged_by_group: dict[int, int],
    now: datetime | None = None,
) -> list[Drift]:
    """Correct each group's counters to a window's rows; return the drift found.

    `logged_by_group` is the bandwidth all the window's rows of each group say was charged
    (the drift report's baseline). Idempotent: a rerun finds nothing to do.
    """
    now = now or timezone.now()
    by_group: dict[int, list[LoggedCharge]] = defaultdict(list)
    for row in rows:
        by_group[row.group_id].append(row)
    drifts = []
    for group_id, group_rows in sorted(by_group.items()):
        if not Group.objects.filter(pk=group_id).exists():
            continue  # the group is gone: there is no counter left to correct
        with transaction.atomic():
            bandwidth, cost, corrected = run_sync(_correct(group_rows, now=now))
            if not (bandwidth or cost):
                continue
            logged_total = logged_by_group.get(group_id, 0)
            drift = Drift(
                window_start, group_id, logged_total, logged_total - bandwidth, corrected, cost
            )
            SpendAdjustment.objects.create(
                group_id=group_id,
                window_start=window_start,
                amount_micro=drift.spent_micro,
                reason=(
                    f"reconciliation: bandwidth logged {drift.logged_micro}, counters had "
                    f"{drift.charged_micro}; {drift.requests} request(s) corrected"
                    + (f", {cost} of token cost never settled" if cost else "")
                )[:200],
            )
        log.warning(
            "bandwidth drift: group %s window %s logged %d micro-USD, counters had %d: "
            "spent adjusted by %d (token cost of unsettled requests %d)",
            group_id,
            window_start.isoformat(),
            drift.logged_micro,
            drift.charged_micro,
            drift.spent_micro,
            cost,
        )
        drifts.append(drift)
    return drifts


def bandwidth_reconcile(*, now: datetime | None = None) -> list[Drift]:
    """Reconcile every closed window of the usage log not reconciled yet; report the drift
    as a metric."""
    drifts = usage_feed().reconcile_windows(reconcile_window, now=now)
    total = sum(d.amount_micro for d in drifts)
    metrics.RECONCILE_DRIFT.set(total)
    log.info(
        "bandwidth reconciliation: %d window-group(s) drifted, %d micro-USD of bandwidth "
        "and %d of unsettled token cost corrected",
        len(drifts),
        total,
        sum(d.unsettled_cost_micro for d in drifts),
    )
    return drifts
