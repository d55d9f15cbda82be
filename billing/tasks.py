"""Billing's periodic tasks (see CELERY_BEAT_SCHEDULE): thin interfaces to its services, safe
to retry and to run on several workers at once (each step re-checks under its row's lock)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import DatabaseError

from billing import alerts, archives, partitions, reaper, reconcile, services
from billing.feed import usage_feed

log = logging.getLogger(__name__)

RETRY = {"autoretry_for": (DatabaseError,), "retry_backoff": True, "max_retries": 3}


@shared_task(name="billing.roll_periods", **RETRY)
def roll_periods() -> int:
    """Close the budget periods that ended, for groups and keys nothing charged since."""
    rolled = services.budget_periods_roll()
    if rolled:
        log.info("rolled %d budget period(s)", rolled)
    return rolled


@shared_task(name="billing.expire_stale_holds", **RETRY)
def expire_stale_holds() -> dict:
    """Store the usage journal first: a late row settles its holds at measured cost; the
    reaper charges the rest that were sent (unmeasured) and releases those that never left."""
    usage_feed().store_journaled()
    reservations, holds = reaper.expire_stale_holds()
    if reservations or holds:
        log.info("reaped %d reservation(s) and %d spend hold(s)", reservations, holds)
    return {"reservations": reservations, "holds": holds}


@shared_task(name="billing.reconcile_bandwidth", **RETRY)
def reconcile_bandwidth() -> dict:
    """Correct the counters to what the usage rows of each closed window say was charged."""
    drifts = reconcile.bandwidth_reconcile()
    return {
        "drifted": len(drifts),
        "bandwidth_micro": sum(d.amount_micro for d in drifts),
        "spent_micro": sum(d.spent_micro for d in drifts),
    }


@shared_task(name="billing.deliver_budget_alerts", **RETRY)
def deliver_budget_alerts() -> dict:
    """Send the spend alerts settlement raised (once each, retried with backoff)."""
    report = alerts.budget_alerts_deliver()
    return {"delivered": report.delivered, "retrying": report.retrying, "failed": report.failed}


@shared_task(name="billing.archive_receipts", **RETRY)
def archive_receipts() -> dict:
    """Archive the receipts past TOLLGATE_RECEIPT_RETENTION_DAYS a whole month at a time and
    remove them from PostgreSQL (each account's last receipt stays)."""
    report = archives.apply_receipt_retention()
    if report.archived or report.removed:
        log.info(
            "archived %d month(s), removed %d receipt(s)", len(report.archived), report.removed
        )
    return {"archived": [f"{a}/{p}" for a, p in report.archived], "removed": report.removed}


@shared_task(name="billing.ensure_partitions", **RETRY)
def ensure_partitions() -> list[str]:
    """Create the partitions of the per-request billing tables (slices of months), this month
    through two ahead (PostgreSQL)."""
    return partitions.ensure_months_ahead()


@shared_task(name="billing.apply_retention", **RETRY)
def apply_retention() -> dict:
    """Drop the per-request billing rows past TOLLGATE_BILLING_STATE_RETENTION_DAYS with none
    of their slice's still open."""
    report = partitions.apply_retention()
    return {
        "cutoff": report.cutoff.isoformat() if report.cutoff else None,
        "dropped": report.dropped,
        "kept_open": report.kept_open,
        "deleted_rows": report.deleted_rows,
    }
