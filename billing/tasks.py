"""Billing's periodic task (see CELERY_BEAT_SCHEDULE): a thin interface to its service, safe
to retry and to run on several workers at once (each roll re-checks under the row's lock)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import DatabaseError

from billing import services

log = logging.getLogger(__name__)


@shared_task(
    name="billing.roll_periods",
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=3,
)
def roll_periods() -> int:
    """Close the budget periods that ended, for groups and keys nothing charged since."""
    rolled = services.budget_periods_roll()
    if rolled:
        log.info("rolled %d budget period(s)", rolled)
    return rolled
