"""CELERY_BEAT_SCHEDULE: what beat runs and how often, from the TOLLGATE setting's periods.

Each task is a thin interface to a service; every one is safe to run twice or concurrently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def beat_schedule(tollgate: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return beat's schedule for the TOLLGATE setting `tollgate`."""
    return {
        "usage-flush-events": {
            "task": "usage.flush_events",
            "schedule": float(tollgate["USAGE_WINDOW_S"]),
        },
        "billing-reconcile-bandwidth": {
            "task": "billing.reconcile_bandwidth",
            "schedule": float(tollgate["USAGE_WINDOW_S"]),
        },
        # Closed days' rollups against their rows: one day's work at most once a day, so hourly.
        "usage-reconcile-rollups": {"task": "usage.reconcile_rollups", "schedule": 3600.0},
        # The usage log's monthly partitions (PostgreSQL), made ahead of the rows that need them;
        # retention drops whole months past TOLLGATE_USAGE_RETENTION_DAYS (0: never).
        "usage-ensure-partitions": {"task": "usage.ensure_partitions", "schedule": 6 * 3600.0},
        "usage-apply-retention": {"task": "usage.apply_retention", "schedule": 3600.0},
        # The per-request billing tables' partitions (PostgreSQL: slices of months), made
        # ahead the same way; retention drops closed working state past
        # TOLLGATE_BILLING_STATE_RETENTION_DAYS (never under 7).
        "billing-ensure-partitions": {"task": "billing.ensure_partitions", "schedule": 6 * 3600.0},
        "billing-apply-retention": {"task": "billing.apply_retention", "schedule": 3600.0},
        # Receipts past TOLLGATE_RECEIPT_RETENTION_DAYS (0: never) archived a month at a time.
        "billing-archive-receipts": {"task": "billing.archive_receipts", "schedule": 3600.0},
        "usage-drain-journal": {
            "task": "usage.drain_journal",
            "schedule": max(1.0, tollgate["USAGE_CLAIM_IDLE_MS"] / 1000),
        },
        # Budget periods end at midnight in each account's zone; rows nothing charged since are
        # rolled within this lag (a hold reads an ended period as fresh anyway; settle rolls first).
        "billing-roll-periods": {
            "task": "billing.roll_periods",
            "schedule": float(tollgate["BUDGET_ROLL_S"]),
        },
        "billing-deliver-budget-alerts": {
            "task": "billing.deliver_budget_alerts",
            "schedule": float(tollgate["BUDGET_ALERTS_S"]),
        },
        # Tenant alerts: evaluate the rules against the counters, then send what is due.
        "alerts-run": {"task": "alerts.run", "schedule": float(tollgate["ALERTS_S"])},
        "billing-expire-stale-holds": {
            "task": "billing.expire_stale_holds",
            "schedule": float(min(60, tollgate["RESERVATION_TTL_S"])),
        },
        # Crawl jobs are handed to a worker when queued; this picks up a lost hand-off and the
        # jobs of a worker that died (their lease lapsed).
        "webfetch-run-crawls": {
            "task": "webfetch.run_crawls",
            "schedule": float(max(5, tollgate["CRAWL_LEASE_S"] // 2)),
        },
    }
