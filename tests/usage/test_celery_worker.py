"""A real `celery -A config worker -B` process runs the beat schedule against the test
database and the Redis broker: the usage of real requests comes out as delivered events."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from django.conf import settings

from tests.support.processes import ROOT, child_env
from tests.support.processes import child_database_url as database_url
from tests.support.services import requires_redis
from tests.support.usage import chat, usage_rows
from tests.support.waits import wait_until

pytestmark = requires_redis


@pytest.fixture
def celery_worker(stack, tmp_path):
    log_path = tmp_path / "celery.log"
    env = child_env(
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        SECRET_KEY=settings.SECRET_KEY,
        SEALING_KEYS=settings.SEALING_KEYS,
        TOLLGATE_VAR_DIR=str(tmp_path),
        TOLLGATE_USAGE_WINDOW_S="1",
        TOLLGATE_USAGE_GRACE_S="1",
        TOLLGATE_USAGE_CLAIM_IDLE_MS="1000",
    )
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-B",
                "--pool",
                "solo",
                "--purge",
                "--loglevel",
                "INFO",
                "--schedule",
                str(tmp_path / "beat-schedule"),
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    proc.log = lambda: log_path.read_text(errors="replace")
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_a_real_worker_turns_real_requests_into_delivered_events(stack, celery_worker):
    from usage.models import UsageEvent

    tenant = stack.tenant()
    replies = [
        chat(
            stack.url,
            tenant,
            {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "one two"}]},
        )[0],
        chat(
            stack.url,
            tenant,
            {
                "model": "claude-3-5-haiku",
                "max_tokens": 20,
                "messages": [{"role": "user", "content": "three"}],
            },
            path="/v1/messages",
        )[0],
    ]
    assert [r.status_code for r in replies] == [200, 200]
    rows = usage_rows([r.headers["x-request-id"] for r in replies], expect=2)

    def delivered():
        if celery_worker.poll() is not None:
            pytest.fail(f"the worker exited:\n{celery_worker.log()[-3000:]}")
        events = list(UsageEvent.objects.filter(group_id=tenant.group_id))
        covered = sum(e.payload["requests"] for e in events)
        return covered == 2 and all(e.delivery == "delivered" for e in events) and events

    events = wait_until(
        delivered,
        timeout_s=45,
        interval_s=0.2,
        what="the worker to emit and deliver the group's events",
    )

    units = {
        unit: sum(e.payload["units"][unit] for e in events)
        for unit in (
            "tokens_in",
            "tokens_out",
            "provider_cost_micro_usd",
            "bytes_in",
            "bytes_out",
            "byok_tokens_in",
            "byok_tokens_out",
        )
    }
    assert units == {
        "tokens_in": 3,
        "tokens_out": 16,
        "provider_cost_micro_usd": sum(r.provider_cost_micro for r in rows),
        "bytes_in": sum(r.bytes_in for r in rows),
        "bytes_out": sum(r.bytes_out for r in rows),
        "byok_tokens_in": 0,
        "byok_tokens_out": 0,
    }
    assert all(e.window_s == 1 and e.account_id == tenant.account_id for e in events)
    log = celery_worker.log()
    for event in events:
        assert f"usage event {event.payload['event_id']} " in log  # the log sink's line
    for task in ("usage.flush_events", "usage.reconcile_bandwidth", "usage.drain_journal"):
        wait_until(
            lambda task=task: f"Task {task}[" in celery_worker.log(),
            timeout_s=10,
            what=f"{task} to run",
        )
