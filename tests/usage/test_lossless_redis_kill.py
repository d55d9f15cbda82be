"""Usage rows survive a `kill -9` of a Redis that keeps an append-only file.

The usage journal is a Redis stream (usage/writer.py). Production runs Redis with
`appendonly yes` (compose.yaml) and the gateway refuses one without it
(TOLLGATE_REDIS_PERSISTENCE=check). Here a Redis of the test's own fsyncs every write
(`appendfsync always`: the XADD that journals a row is on disk before its reply, so before
the client reads the end of its answer), a real gateway answers official-SDK requests,
streamed and not, and journals their rows; its own writer would store them only after ten
minutes, and no Celery worker runs. Redis is killed with SIGKILL, restarted on the same
folder, and only then does a real Celery worker (`celery -A config worker -B`, its beat's
`usage.drain_journal`) drain the journal into PostgreSQL: every row is back, with its exact
tokens and cost, and the wallet and group were charged exactly that, once.
"""

from __future__ import annotations

import signal

import pytest
import redis

from accounts.models import Group
from billing.models import Receipt, Reservation, SpendHold, Wallet
from tests.support.processes import RedisServer, free_port, start_worker
from tests.support.services import requires_postgres, requires_redis
from tests.support.stacks import own_stack
from tests.support.waits import wait_until
from usage.models import UsageLog
from usage.writer import JOURNAL

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(150)]
WALLET = 1_000_000
REQUESTS = 6
HELLO = [{"role": "user", "content": "hello there"}]  # the stub bills 2 tokens in, 8 out
COST = 6  # 2 x 0.15 + 8 x 0.60 = 5.1 micro-USD, rounded up


@pytest.fixture
def persistent_redis(tmp_path):
    """A redis-server of the test's own with an append-only file fsynced on every write."""
    server = RedisServer(port=free_port(), aof_dir=tmp_path / "redis")
    server.aof_dir.mkdir()
    server.start()
    redis.Redis(port=server.port).config_set("appendfsync", "always")
    yield server
    server.stop()


def ask(client, n: int) -> tuple[str, int, int]:
    """Ask once (even n streamed); return the request id and the tokens the SDK was told."""
    if n % 2:
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=HELLO)
        usage = raw.parse().usage
        return raw.headers["x-tollgate-request-id"], usage.prompt_tokens, usage.completion_tokens
    with client.chat.completions.with_streaming_response.create(
        model="gpt-4o-mini", messages=HELLO, stream=True, stream_options={"include_usage": True}
    ) as response:
        request_id = response.headers["x-tollgate-request-id"]
        chunks = list(response.parse())
    [usage] = [chunk.usage for chunk in chunks if chunk.usage is not None]
    return request_id, usage.prompt_tokens, usage.completion_tokens


def test_rows_journaled_before_a_kill_9_of_a_persistent_redis_are_stored_after_it(
    transactional_db, spawn_gateway, stub, persistent_redis, tmp_path
):
    journal = redis.Redis(port=persistent_redis.port)
    assert journal.config_get("appendonly") == {"appendonly": "yes"}
    gateway = spawn_gateway(
        REDIS_URL=persistent_redis.url,
        TOLLGATE_REDIS_PERSISTENCE="check",  # as in production: it starts only on an AOF
        TOLLGATE_USAGE_FLUSH_MS="600000",  # its own writer waits ten minutes
    )
    stack = own_stack(gateway, stub)
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    client = stack.openai(tenant)

    told = dict(
        (rid, (tokens_in, tokens_out))
        for rid, tokens_in, tokens_out in (ask(client, n) for n in range(REQUESTS))
    )
    assert len(told) == REQUESTS
    assert set(told.values()) == {(2, 8)}
    assert journal.xlen(JOURNAL) == REQUESTS  # journaled, not stored
    assert not UsageLog.objects.filter(request_id__in=told).exists()

    persistent_redis.stop()  # SIGKILL: no shutdown, no final AOF rewrite
    persistent_redis.start()  # the same port and folder: the AOF is replayed
    assert journal.xlen(JOURNAL) == REQUESTS
    # Killed too (a clean stop would store the journal itself): what comes back now came
    # from Redis's disk, and only the worker stores it.
    gateway.stop(signal.SIGKILL)

    worker = start_worker(
        tmp_path,
        "drain",
        "-B",
        "--schedule",
        str(tmp_path / "beat-schedule"),
        REDIS_URL=persistent_redis.url,
        TOLLGATE_USAGE_CLAIM_IDLE_MS="1000",  # beat's usage.drain_journal every second
    )
    try:

        def stored():
            if worker.proc.poll() is not None:
                pytest.fail(f"the worker exited:\n{worker.log()[-3000:]}")
            rows = list(UsageLog.objects.filter(request_id__in=told))
            return rows if len(rows) == REQUESTS else None

        rows = wait_until(stored, timeout_s=60, interval_s=0.2, what="the drained rows")
    finally:
        worker.stop()

    assert "Task usage.drain_journal[" in worker.log()
    assert journal.xlen(JOURNAL) == 0
    assert {r.request_id: (r.tokens_in, r.tokens_out) for r in rows} == told
    assert [(r.provider_cost_micro, r.served_by, r.status) for r in rows] == [
        (COST, "platform", 200)
    ] * REQUESTS
    assert sorted(r.streamed for r in rows) == [False] * 3 + [True] * 3
    assert UsageLog.objects.filter(group_id=tenant.group_id).count() == REQUESTS
    # The money: each reservation committed at the measured cost, once; nothing left held.
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET - REQUESTS * COST, 0)
    assert (
        sorted(Reservation.objects.filter(wallet=wallet).values_list("status", "committed_micro"))
        == [("committed", COST)] * REQUESTS
    )
    assert not SpendHold.objects.filter(group_id=tenant.group_id, status="held").exists()
    group = Group.objects.get(pk=tenant.group_id)
    bandwidth = sum(r.bandwidth_charge_micro for r in rows)
    assert (group.settled_micro, group.spent_micro, group.reserved_micro) == (
        REQUESTS * COST,
        REQUESTS * COST + bandwidth,
        0,
    )
    assert (
        sorted(
            Receipt.objects.filter(account_id=tenant.account_id).values_list("kind", "cost_micro")
        )
        == [("charge", COST)] * REQUESTS
    )
