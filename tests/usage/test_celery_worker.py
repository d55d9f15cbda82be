"""A real `celery -A config worker -B` process runs the beat schedule against the test
database and the Redis broker: the usage of real requests comes out as delivered events."""

from __future__ import annotations

import pytest

from tests.support.processes import start_worker
from tests.support.services import requires_redis
from tests.support.usage import chat, journal_row, store, usage_rows
from tests.support.waits import wait_until

pytestmark = requires_redis


@pytest.fixture
def celery_worker(stack, tmp_path):
    worker = start_worker(
        tmp_path,
        "beat",
        "-B",
        "--purge",
        "--schedule",
        str(tmp_path / "beat-schedule"),
        TOLLGATE_USAGE_WINDOW_S="1",
        TOLLGATE_USAGE_GRACE_S="1",
        TOLLGATE_USAGE_CLAIM_IDLE_MS="1000",
    )
    worker.proc.log = worker.log
    yield worker.proc
    worker.stop()


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
    for task in ("usage.flush_events", "billing.reconcile_bandwidth", "usage.drain_journal"):
        wait_until(
            lambda task=task: f"Task {task}[" in celery_worker.log(),
            timeout_s=10,
            what=f"{task} to run",
        )


def test_a_real_worker_audits_the_rollups_and_rebuilds_a_day_that_differs(stack, celery_worker):
    from datetime import UTC, datetime, timedelta

    from config.celery import app
    from usage.models import UsageCursor, UsageDailyRollup, UsageRollup
    from usage.rollups import RECONCILE_CURSOR

    tenant = stack.tenant()
    day = datetime(2026, 4, 1, tzinfo=UTC)
    rows = [
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            created_at=day + timedelta(hours=h),
            tokens_in=10 * h,
            provider_cost_micro=3 * h,
        )
        for h in range(6)
    ]
    store(*rows)
    UsageCursor.objects.update_or_create(name=RECONCILE_CURSOR, defaults={"position": day})
    mine = {"account_id": tenant.account_id}
    UsageRollup.objects.filter(**mine, hour=day + timedelta(hours=2)).update(tokens_in=1)
    UsageDailyRollup.objects.filter(**mine).update(provider_cost_micro=0)

    # Sent once the worker listens: its --purge at start would erase an earlier message.
    wait_until(lambda: " ready." in celery_worker.log(), timeout_s=30, what="the worker")
    app.send_task("usage.reconcile_rollups")  # what beat does once an hour

    def rebuilt():
        if celery_worker.poll() is not None:
            pytest.fail(f"the worker exited:\n{celery_worker.log()[-3000:]}")
        [daily] = UsageDailyRollup.objects.filter(**mine)
        return daily.provider_cost_micro == 3 * sum(range(6))

    wait_until(rebuilt, timeout_s=30, what="the worker to rebuild April 1's rollups")
    hour_2 = UsageRollup.objects.get(**mine, hour=day + timedelta(hours=2))
    assert (hour_2.requests, hour_2.tokens_in) == (1, 20)
    assert UsageCursor.objects.get(name=RECONCILE_CURSOR).position > day
