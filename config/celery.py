"""The Celery app: `celery -A config worker` and `celery -A config beat`."""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery
from celery.beat import PersistentScheduler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("tollgate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class BeatScheduler(PersistentScheduler):
    """Celery's file-backed scheduler, which first creates the directory of its file.

    The schedule lives under var/ by default (TOLLGATE_BEAT_SCHEDULE moves it), and only an
    embedded run creates var/: without this, `celery -A config beat` (or `worker -B`) on a
    fresh production checkout stops with FileNotFoundError.
    """

    def setup_schedule(self) -> None:
        Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
        super().setup_schedule()
