"""Settle finished requests in batches, in the transaction that stores their usage rows.

A usage record (core.usage_record) says everything a request owes: its platform cost, its
bandwidth charge, the reservation its served attempt held. Gateways journal the record before
the client sees the end of its answer; the writer that stores a batch applies its money in the
same transaction (billing.ledger.settle: the batched form of the ledger's own steps), so a
stored row and its settlement never exist one without the other:

- each served reservation committed at measured cost up to the hold, wallets moved once
  each, one ledger entry per commit; a cost above the hold collected after it from what the
  wallet has available (an 'excess' entry), what it could not cover stated as uncollected
  and left out of the counters and the receipt's amounts;
- budget holds of the batch released;
- a settled-request marker per charged request (INSERT ... ON CONFLICT DO NOTHING): only
  the inserter charges, so a replayed row or a late reconciliation never charges twice;
- group / key / caller counters moved once per row owner (spent += cost + bandwidth,
  settled += cost, reserved -= hold);
- a request the reaper charged at its hold before its row arrived trued up to the row's
  measured cost (billing.ledger.settle.true_up);
- a signed receipt per row of an account, proving what was charged and naming the ledger
  entries that took it from the wallet (billing/receipts.py, billing/receipt_ledger.py).

Until a row is stored its hold and reservation stay in place: budget and wallet checks only
ever see more held than will be spent, never less. Holds whose row never arrives (a gateway
died before journaling) are resolved by the reaper (billing/reaper.py).
"""

from __future__ import annotations

from datetime import datetime

from billing import receipts
from billing.ledger.settle import Settle, Settled, WalletMoved, settle
from billing.models import Receipt
from core.sqlexec import Program, run_here
from core.usage_record import UsageRecord


def settle_rows(records: list[UsageRecord], *, now: datetime) -> set[str]:
    """Apply the money of freshly stored usage records and write their receipts (call inside
    their transaction). Returns the request ids trued up: the reaper had charged them at
    their hold."""
    return run_here(_settle(records, now=now))


def _settle(records: list[UsageRecord], *, now: datetime) -> Program[set[str]]:
    settled = yield from settle(
        [
            Settle(
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
    yield from receipts.append(
        [
            receipt_of(record, settled)
            for record in records
            if record.account_id is not None and record.group_id is not None
        ],
        now=now,
    )
    return {rid for rid, trued in settled.trued_up.items() if trued.counters}


def receipt_of(record: UsageRecord, settled: Settled) -> receipts.Draft:
    """The receipt of a stored row: what settling it charged (or trued up)."""
    assert record.account_id is not None  # only rows of an account get receipts
    detail = receipts.request_detail(record)
    kind, cost, bandwidth = Receipt.Kind.CHARGE, 0, 0
    if record.cache_status == "hit":  # no vendor call: the cache's price, and what it saved
        kind = Receipt.Kind.CACHE_HIT
        detail["cache"] = {"status": "hit", "uncached_cost_micro": record.uncached_cost_micro}
    wallet = settled.wallet.get(record.request_id) or WalletMoved()
    if record.request_id in settled.charged:
        # What was taken: the measured cost less what the wallet could not cover.
        cost = record.provider_cost_micro - wallet.uncollected_micro
        bandwidth = record.bandwidth_charge_micro
    trued = settled.trued_up.get(record.request_id)
    if trued is not None:
        detail["trued_up"] = {
            "charged_at_hold_micro": trued.charged_before_micro,
            "wallet_returned_micro": trued.wallet_micro,
        }
        if trued.counters:
            kind, cost, bandwidth = Receipt.Kind.TRUEUP, trued.cost_micro, trued.bandwidth_micro
    return receipts.Draft(
        account_id=record.account_id,
        request_id=record.request_id,
        kind=kind,
        group_id=record.group_id,
        api_key_id=record.api_key_id,
        cost_micro=cost,
        bandwidth_micro=bandwidth,
        detail=detail,
        wallet_entries=tuple(wallet.entries),
        wallet_taken_micro=wallet.taken_micro,
        uncollected_micro=wallet.uncollected_micro,
    )
