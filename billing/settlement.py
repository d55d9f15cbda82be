"""Settle finished requests in batches, in the transaction that stores their usage rows.

A usage record (core.usage_record) says everything a request owes: its platform cost, its
bandwidth charge, the reservation its served attempt held. Gateways journal the record before
the client sees the end of its answer; the writer that stores a batch applies its money in the
same transaction (billing.ledger.settle: the batched form of the ledger's own steps), so a
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
from core.sqlexec import run_here
from core.usage_record import UsageRecord


def settle_rows(records: list[UsageRecord], *, now: datetime) -> None:
    """Apply the money of freshly stored usage records (call inside their transaction)."""
    run_here(
        ledger.settle(
            [
                ledger.Settle(
                    request_id=record.request_id,
                    group_id=record.group_id,
                    api_key_id=record.api_key_id,
                    cost_micro=record.provider_cost_micro,
                    bandwidth_micro=record.bandwidth_charge_micro,
                    reservation_id=record.reservation_id,
                )
                for record in records
            ],
            now=now,
        )
    )
