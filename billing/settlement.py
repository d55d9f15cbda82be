"""Settle finished requests in batches, in the transaction that stores their usage rows.

A usage row says everything a request owes: its platform cost, its bandwidth charge, the
reservation its served attempt held. Gateways journal the row before the client sees the
end of its answer; the writer that stores a batch of rows applies their money in the same
transaction (billing.ledger.settle: the batched form of the ledger's own steps), so a
stored row and its settlement never exist one without the other:

- each served reservation committed at measured cost (capped at the hold, the excess
  recorded), wallets moved once each, one ledger entry per commit;
- budget holds of the batch released;
- a settled-request marker per charged request (INSERT ... ON CONFLICT DO NOTHING): only
  the inserter charges, so a replayed row or a late reconciliation never charges twice;
- group / key / caller counters moved once per row owner (spent += cost + bandwidth,
  settled += cost, reserved -= hold).

Until a row is stored its hold and reservation stay in place: budget and wallet checks only
ever see more held than will be spent, never less. Holds whose row never arrives (a gateway
died before journaling) are resolved by the reaper (billing/reaper.py).
"""

from __future__ import annotations

from datetime import datetime

from billing import ledger
from billing.sqlexec import run_here

SERVED = "ok"


def served_reservation(row: dict) -> int | None:
    """Return the reservation of the attempt that served the answer, if it held one."""
    for attempt in row.get("attempts") or ():
        if attempt.get("outcome") == SERVED and attempt.get("reservation_id"):
            return attempt["reservation_id"]
    return None


def settle_rows(rows: list[dict], *, now: datetime) -> None:
    """Apply the money of freshly stored usage rows (call inside their transaction)."""
    run_here(
        ledger.settle(
            [
                ledger.Settle(
                    request_id=row["request_id"],
                    group_id=row["group_id"],
                    api_key_id=row["api_key_id"],
                    cost_micro=row["provider_cost_micro"],
                    bandwidth_micro=row["bandwidth_charge_micro"],
                    reservation_id=served_reservation(row),
                )
                for row in rows
            ],
            now=now,
        )
    )
