"""Periodic tasks (see CELERY_BEAT_SCHEDULE): thin interfaces to the services, safe to retry
and to run on several workers at once."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from usage import partitions, rollups, services

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


@shared_task(name="usage.reconcile_rollups", **RETRY)
def reconcile_rollups() -> dict:
    """Audit closed days' hourly rollups against their rows; rebuild a day that differs."""
    rebuilt = rollups.reconcile_rollups()
    return {"rebuilt_days": [day.date().isoformat() for day in rebuilt]}


@shared_task(name="usage.ensure_partitions", **RETRY)
def ensure_partitions() -> list[str]:
    """Create the usage log's monthly partitions, this month through two ahead (PostgreSQL)."""
    return partitions.ensure_months_ahead()


@shared_task(name="usage.apply_retention", **RETRY)
def apply_retention() -> dict:
    """Drop the usage months past TOLLGATE_USAGE_RETENTION_DAYS whose rollups were audited."""
    report = partitions.apply_retention()
    return {
        "cutoff": report.cutoff.isoformat() if report.cutoff else None,
        "dropped": report.dropped,
        "deleted_rows": report.deleted_rows,
    }


@shared_task(name="usage.drain_journal", **RETRY)
def drain_journal() -> int:
    """Store every journaled usage row, claiming those a dead gateway read."""
    return services.usage_journal_drain()
