"""Lossless usage: every request the client saw complete has its row, even when the gateway
that served it is killed with SIGKILL before writing a single row to the database."""

from __future__ import annotations

import asyncio
import signal
import uuid

import httpx
import orjson
import redis
from django.conf import settings

from tests.support.services import requires_redis
from tests.support.stacks import own_stack
from tests.support.usage import journal_row, usage_rows
from tests.support.waits import wait_until

pytestmark = requires_redis

BURST = 50


async def _burst(url: str, api_key: str, request_ids: list[str]) -> list[int]:
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=BURST)) as client:
        replies = await asyncio.gather(
            *[
                client.post(
                    f"{url}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {api_key}", "X-Request-Id": rid},
                    json={
                        "model": "gpt-4o-mini",
                        "messages": [{"role": "user", "content": f"request {n}"}],
                    },
                )
                for n, rid in enumerate(request_ids)
            ]
        )
    return [reply.status_code for reply in replies]


def test_sigkilled_gateway_loses_no_row_of_a_completed_burst(
    transactional_db,
    gateway_factory,
    stub,
):
    # The victim never flushes on its own: every row it journaled is still only in Redis.
    victim = own_stack(gateway_factory(TOLLGATE_USAGE_FLUSH_MS="600000"), stub)
    tenant = victim.tenant()
    request_ids = [f"burst-{uuid.uuid4().hex[:8]}-{n}" for n in range(BURST)]

    statuses = asyncio.run(_burst(victim.url, tenant.api_key, request_ids))
    victim.gateway.stop(signal.SIGKILL)

    assert statuses == [200] * BURST
    assert victim.gateway.proc.returncode == -signal.SIGKILL
    # A survivor with a short claim idle time takes over the journal.
    survivor = gateway_factory(TOLLGATE_USAGE_CLAIM_IDLE_MS="200")
    try:
        rows = usage_rows(request_ids, expect=BURST)
    finally:
        survivor.stop()
    assert sorted(r.client_request_id for r in rows) == sorted(request_ids)
    assert {(r.status, r.group_id, r.tokens_in, r.tokens_out) for r in rows} == {
        (200, tenant.group_id, 2, 8)
    }
    assert all(len(r.attempts) == 1 for r in rows)


def test_drain_stores_rows_a_dead_replica_read_but_never_stored(transactional_db):
    from tests.support.tenants import make_tenant
    from usage.models import UsageLog
    from usage.writer import GROUP, JOURNAL, drain_journal_sync

    tenant = make_tenant()
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.xgroup_create(JOURNAL, GROUP, id="0", mkstream=True)
    except redis.ResponseError:
        pass  # the group exists already
    rows = [
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id=f"orphan-{uuid.uuid4().hex[:8]}-{n}",
            tokens_in=n,
            attempts=[
                {
                    "order": 1,
                    "provider": "stub-openai",
                    "model": "gpt-4o-mini",
                    "served_by": "platform",
                    "source": "s",
                    "outcome": "ok",
                    "upstream_status": 200,
                    "latency_ms": 3,
                    "reservation_id": None,
                }
            ],
        )
        for n in range(3)
    ]
    # Journal the rows and read them as a replica that then dies, in one atomic step, so no
    # living replica reads them first.
    pipe = client.pipeline(transaction=True)
    for row in rows:
        pipe.xadd(JOURNAL, {"row": orjson.dumps(row)})
    pipe.xreadgroup(GROUP, "replica-that-died", {JOURNAL: ">"}, count=1000)
    pipe.execute()
    pending = {
        e["message_id"]
        for e in client.xpending_range(
            JOURNAL, GROUP, min="-", max="+", count=1000, consumername="replica-that-died"
        )
    }
    assert len(pending) >= 3
    ids = [row["request_id"] for row in rows]

    def drained():
        drain_journal_sync(settings.REDIS_URL, idle_ms=100)
        return UsageLog.objects.filter(request_id__in=ids).count() == 3

    wait_until(drained, what="the drain to claim the dead replica's rows")

    assert sorted(
        UsageLog.objects.filter(request_id__in=ids).values_list("tokens_in", flat=True)
    ) == [0, 1, 2]
    drain_journal_sync(settings.REDIS_URL, idle_ms=0)
    assert UsageLog.objects.filter(request_id__in=ids).count() == 3  # nothing stored twice
    left = {
        e["message_id"]
        for e in client.xpending_range(
            JOURNAL, GROUP, min="-", max="+", count=1000, consumername="replica-that-died"
        )
    }
    assert not (pending & left)
    client.close()
