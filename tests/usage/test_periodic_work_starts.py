"""Periodic work starts as the README says, on a fresh production checkout: no var/, no
`--schedule` flag. `celery -A config beat` beside `celery -A config worker`, and
`celery -A config worker -B`, run as real processes from a directory with no var/
(TOLLGATE_VAR_DIR names one that does not exist), against the test database and the Redis
broker, and the usage event window task and the reaper of expired holds run."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.processes import ROOT, child_env
from tests.support.processes import child_database_url as database_url
from tests.support.services import requires_redis
from tests.support.waits import wait_until

pytestmark = requires_redis

# The schedule's shortest intervals, through the settings that set them: the usage window
# (usage.flush_events, billing.reconcile_bandwidth) and the hold TTL (the reaper's period is
# min(60 s, TOLLGATE_RESERVATION_TTL_S), which may not be under the request deadline).
FAST = {
    "TOLLGATE_USAGE_WINDOW_S": "1",
    "TOLLGATE_USAGE_GRACE_S": "1",
    "TOLLGATE_REQUEST_DEADLINE_S": "2",
    "TOLLGATE_RESERVATION_TTL_S": "2",
}
PERIODIC = ("usage.flush_events", "billing.expire_stale_holds")


class Celery:
    """A `celery -A config ...` process started from `cwd`, logging to a file."""

    def __init__(self, args: list[str], *, cwd: Path, log: Path, **env: str) -> None:
        self.log_path = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", *args],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env(
                    PYTHONPATH=str(ROOT),  # the checkout, importable from anywhere
                    DATABASE_URL=database_url(),
                    REDIS_URL=settings.REDIS_URL,
                    SECRET_KEY=settings.SECRET_KEY,
                    SEALING_KEYS=settings.SEALING_KEYS,
                    TOLLGATE_CALLER_KEY=settings.TOLLGATE["CALLER_KEY"] or "off",
                    **FAST,
                    **env,
                ),
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"celery exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def fresh_checkout(tmp_path):
    """A working directory with no var/, and a TOLLGATE_VAR_DIR that does not exist."""
    import redis

    with redis.Redis.from_url(settings.REDIS_URL) as client:
        client.delete("celery")  # tasks an earlier test's beat sent must not count here
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    var_dir = tmp_path / "not-yet" / "var"
    started: list[Celery] = []

    def start(args: list[str], **env: str) -> Celery:
        process = Celery(
            args,
            cwd=cwd,
            log=tmp_path / f"celery-{len(started)}.log",
            TOLLGATE_VAR_DIR=str(var_dir),
            **env,
        )
        started.append(process)
        return process

    start.cwd, start.var_dir = cwd, var_dir
    yield start
    for process in started:
        process.stop()


def succeeded(worker: Celery, task: str) -> int:
    worker.alive()
    return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] succeeded", worker.log()))


def wait_for_periodic_work(worker: Celery) -> None:
    for task in PERIODIC:
        # Twice: a schedule that runs, not one task sent at start.
        wait_until(
            lambda task=task: succeeded(worker, task) >= 2,
            timeout_s=45,
            interval_s=0.25,
            what=f"{task} to run twice",
        )


def test_beat_and_a_worker_start_on_a_fresh_checkout_and_run_the_schedule(
    transactional_db, fresh_checkout
):
    assert not (fresh_checkout.cwd / "var").exists() and not fresh_checkout.var_dir.exists()

    worker = fresh_checkout(["worker", "-l", "info"])
    beat = fresh_checkout(["beat", "-l", "info"])

    wait_for_periodic_work(worker)
    beat.alive()
    assert "FileNotFoundError" not in beat.log()
    assert "Sending due task billing-expire-stale-holds" in beat.log()
    # The default schedule file, under the (now created) TOLLGATE_VAR_DIR; nothing in cwd.
    assert list(fresh_checkout.var_dir.glob("celerybeat-schedule*"))
    assert not (fresh_checkout.cwd / "var").exists()
    assert not list(fresh_checkout.cwd.glob("celerybeat-schedule*"))


def test_worker_with_embedded_beat_starts_on_a_fresh_checkout(transactional_db, fresh_checkout):
    schedule = fresh_checkout.cwd.parent / "state" / "beat" / "schedule"

    worker = fresh_checkout(["worker", "-B", "-l", "info"], TOLLGATE_BEAT_SCHEDULE=str(schedule))

    wait_for_periodic_work(worker)
    assert "FileNotFoundError" not in worker.log()
    assert "Sending due task billing-expire-stale-holds" in worker.log()  # its own beat
    assert list(schedule.parent.glob("schedule*"))  # where TOLLGATE_BEAT_SCHEDULE says
