"""Periodic tasks (see CELERY_BEAT_SCHEDULE): thin interfaces to the services, safe to retry
and to run on several workers at once."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import DatabaseError

from billing import partitions as billing_partitions
from billing.reaper import expire_stale_holds as reaper_expire_stale_holds
from usage import alerts, partitions, rollups, services

log = logging.getLogger(__name__)

RETRY = {"autoretry_for": (DatabaseError,), "retry_backoff": True, "max_retries": 3}


@shared_task(name="usage.flush_events", **RETRY)
def flush_events() -> dict:
    """Write the events of closed windows, then send those that are due."""
    emitted = services.usage_events_flush()
    report = services.usage_events_deliver()
    return {
        "emitted": emitted,
        "delivered": report.delivered,
        "retrying": report.retrying,
        "failed": report.failed,
    }


@shared_task(name="usage.deliver_budget_alerts", **RETRY)
def deliver_budget_alerts() -> dict:
    """Send the spend alerts settlement raised (once each, retried with backoff)."""
    report = alerts.budget_alerts_deliver()
    return {"delivered": report.delivered, "retrying": report.retrying, "failed": report.failed}


@shared_task(name="usage.reconcile_bandwidth", **RETRY)
def reconcile_bandwidth() -> dict:
    drifts = services.bandwidth_reconcile()
    return {
        "drifted": len(drifts),
        "bandwidth_micro": sum(d.amount_micro for d in drifts),
        "spent_micro": sum(d.spent_micro for d in drifts),
    }


@shared_task(name="usage.reconcile_rollups", **RETRY)
def reconcile_rollups() -> dict:
    """Audit closed days' hourly rollups against their rows; rebuild a day that differs."""
    rebuilt = rollups.reconcile_rollups()
    return {"rebuilt_days": [day.date().isoformat() for day in rebuilt]}


@shared_task(name="usage.ensure_partitions", **RETRY)
def ensure_partitions() -> list[str]:
    """Create the monthly partitions of the usage log and of the per-request billing tables,
    this month through two ahead (PostgreSQL)."""
    return partitions.ensure_months_ahead() + billing_partitions.ensure_months_ahead()


@shared_task(name="usage.apply_retention", **RETRY)
def apply_retention() -> dict:
    """Drop the usage months past TOLLGATE_USAGE_RETENTION_DAYS whose rollups were audited,
    and the per-request billing rows as old with none of their month's still open."""
    report = partitions.apply_retention()
    books = billing_partitions.apply_retention()
    return {
        "cutoff": report.cutoff.isoformat() if report.cutoff else None,
        "dropped": report.dropped,
        "deleted_rows": report.deleted_rows,
        "billing": {
            "cutoff": books.cutoff.isoformat() if books.cutoff else None,
            "dropped": books.dropped,
            "kept_open": books.kept_open,
            "deleted_rows": books.deleted_rows,
        },
    }


@shared_task(name="usage.drain_journal", **RETRY)
def drain_journal() -> int:
    return services.usage_journal_drain()


# The reaper is billing's (billing/reaper.py); its task is registered here, by its billing
# name, because it drains the usage journal first and billing never imports usage.
@shared_task(name="billing.expire_stale_holds", **RETRY)
def expire_stale_holds() -> dict:
    """Drain the journal first: a late row settles its holds at measured cost; the reaper
    charges the rest that were sent (unmeasured) and releases those that never left."""
    services.usage_journal_drain()
    reservations, holds = reaper_expire_stale_holds()
    if reservations or holds:
        log.info("reaped %d reservation(s) and %d spend hold(s)", reservations, holds)
    return {"reservations": reservations, "holds": holds}
