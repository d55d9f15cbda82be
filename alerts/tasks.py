"""Alerts' periodic task (CELERY_BEAT_SCHEDULE "alerts-run"): a thin interface to
alerts.evaluate and alerts.delivery, safe to run on several workers at once."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from alerts.delivery import deliveries_send
from alerts.evaluate import rules_evaluate


@shared_task(name="alerts.run", autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=3)
def run() -> dict:
    """Fire what the rules reached, then send what is due (new firings, retries, tests)."""
    fired = rules_evaluate()
    report = deliveries_send()
    return {
        "fired": len(fired),
        "delivered": report.delivered,
        "retrying": report.retrying,
        "failed": report.failed,
    }


def kick() -> None:
    """Ask a worker to run now (a test send); beat's next run covers a broker that is down."""
    try:
        run.delay()
    except Exception:  # noqa: BLE001 - the delivery waits for beat
        pass
