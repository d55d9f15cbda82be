"""Beat's schedule names only tasks a worker registers, each app's partitions among them."""

from __future__ import annotations

from django.conf import settings

from config.celery import app


def test_every_scheduled_task_is_registered_with_the_worker():
    app.loader.import_default_modules()  # what a worker does at start: every app's tasks.py
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled - set(app.tasks) == set()
    # Each app keeps its own tables' partitions ahead and applies its own retention.
    assert {
        "usage.ensure_partitions",
        "usage.apply_retention",
        "billing.ensure_partitions",
        "billing.apply_retention",
    } <= scheduled
