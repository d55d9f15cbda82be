"""No poison rows: nothing a client sends makes a usage row unstorable, and a row the database
still refuses goes to the dead-letter table without holding back the rows journaled with it.

Each test has a Redis of its own, so no other gateway of the session reads its journal.
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import orjson
import redis
from django.db import connection

from tests.support.metrics import metric
from tests.support.processes import free_port
from tests.support.services import requires_redis
from tests.support.stacks import own_stack
from tests.support.usage import chat, journal_row, set_bandwidth_rate, usage_rows
from tests.support.waits import wait_until

pytestmark = requires_redis

GOOD = 100
DEAD_LETTERS = "tollgate_usage_dead_letters_total"


def _ask(url: str, api_key: str, count: int) -> list[int]:
    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=20)) as c:
            replies = await asyncio.gather(
                *[
                    c.post(
                        f"{url}/v1/chat/completions",
                        headers={"Authorization": f"Bearer {api_key}"},
                        json={
                            "model": "gpt-4o-mini",
                            "messages": [{"role": "user", "content": f"request {n}"}],
                        },
                    )
                    for n in range(count)
                ]
            )
        return [reply.status_code for reply in replies]

    return asyncio.run(burst())


def _journal_left(url: str) -> tuple[int, int]:
    """Return (entries in the journal stream, entries read but not acknowledged)."""
    from usage.writer import GROUP, JOURNAL

    client = redis.Redis.from_url(url)
    try:
        if not client.exists(JOURNAL):
            return 0, 0
        return client.xlen(JOURNAL), client.xpending(JOURNAL, GROUP)["pending"]
    finally:
        client.close()


def _assert_charged_exactly(group_id: int, rows) -> None:
    from accounts.models import Group

    group = Group.objects.get(pk=group_id)
    cost = sum(r.provider_cost_micro for r in rows)
    bandwidth = sum(r.bandwidth_charge_micro for r in rows)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        cost + bandwidth,
        cost,
        0,
    )


def _text_fits(row) -> bool:
    """Say whether every text column of a stored row fits and holds no control character."""
    from django.db import models

    for f in type(row)._meta.concrete_fields:
        if isinstance(f, models.CharField):
            assert f.max_length is not None  # every text column of a usage row is bounded
            text = getattr(row, f.attname)
            if len(text) > f.max_length or not text.isprintable():
                return False
    return True


def test_client_text_that_no_column_takes_is_cleaned_and_holds_back_no_row(
    transactional_db, spawn_gateway, own_redis, stub
):
    from usage.models import UsageDeadLetter

    stack = own_stack(spawn_gateway(REDIS_URL=own_redis.url, TOLLGATE_USAGE_FLUSH_MS="200"), stub)
    # Invoiced: platform cost lands on the group's counters, which say exactly what was charged.
    tenant = stack.tenant(invoiced=True)
    set_bandwidth_rate(tenant)  # 1 micro-USD per byte: every served row owes bandwidth too
    label = "r" * 300  # an X-Request-Id no column takes

    too_long, _ = chat(
        stack.url,
        tenant,
        {"model": "x" * 201, "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Request-Id": label},
    )
    with_nul, _ = chat(
        stack.url,
        tenant,
        {"model": "gpt\u0000-4o\u0007", "messages": [{"role": "user", "content": "hi"}]},
    )
    anthropic_shaped, _ = chat(
        stack.url,
        tenant,
        {
            "model": "y" * 5000 + "\u0001",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}],
        },
        path="/v1/messages",
    )
    statuses = _ask(stack.url, tenant.api_key, GOOD)

    assert [too_long.status_code, with_nul.status_code, anthropic_shaped.status_code] == [400] * 3
    assert statuses == [200] * GOOD
    # Every row, the refused requests' included, is stored within a few flushes.
    rows = usage_rows(group_id=tenant.group_id, expect=GOOD + 3)
    served = [r for r in rows if r.status == 200]
    refused = {r.model_requested: r for r in rows if r.status == 400}
    assert len(rows) == GOOD + 3
    assert len(served) == GOOD
    assert sorted(refused) == sorted(["x" * 200, "gpt-4o", "y" * 200])
    assert {
        (r.error_code, r.upstream_sent, r.bandwidth_charge_micro) for r in refused.values()
    } == {("LM-2001", False, 0)}
    assert all(_text_fits(r) for r in rows)
    assert all(r.provider_cost_micro > 0 and r.bandwidth_charge_micro > 0 for r in served)
    _assert_charged_exactly(tenant.group_id, rows)
    wait_until(lambda: _journal_left(own_redis.url) == (0, 0), what="an empty journal")
    assert UsageDeadLetter.objects.count() == 0
    assert metric(stack.url, DEAD_LETTERS) == 0.0


def _poisoned_batch(tenant, tag: str) -> tuple[list[dict], list[bytes]]:
    """Return good rows and the journal entries of one batch: the good rows among poison."""
    good = [
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id,
            request_id=f"{tag}-good-{n}",
            tokens_in=10,
            tokens_out=20,
            provider_cost_micro=100 + n,
            bandwidth_charge_micro=7,
        )
        for n in range(5)
    ]
    # Written before cleaning existed (or by a gateway of an older release): the writer
    # cleans it too, so it is stored, not refused.
    good.append(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id=f"{tag}-unclean",
            model_requested="\u0000" + "m" * 400,
            provider_cost_micro=1,
        )
    )
    wrong_type = journal_row(
        group_id="abc",  # type: ignore[arg-type]  # the point: a value of the wrong type
        account_id=tenant.account_id,
        request_id=f"{tag}-wrong-type",
    )
    negative = journal_row(
        group_id=tenant.group_id,
        account_id=tenant.account_id,
        request_id=f"{tag}-negative",
        latency_ms=-1,  # a PositiveIntegerField: the database's CHECK refuses it
        provider_cost_micro=50,
    )
    entries = [orjson.dumps(row) for row in good[:3]]
    entries += [orjson.dumps(wrong_type), b"not a row at all \x00"]
    entries += [orjson.dumps(row) for row in good[3:]]
    entries.append(orjson.dumps(negative))
    return good, entries


def _journal(url: str, entries: list[bytes], *, read_by: str | None = None) -> None:
    """XADD the entries in one step (read at once by a consumer named `read_by`, if given)."""
    from usage.writer import GROUP, JOURNAL

    client = redis.Redis.from_url(url)
    try:
        client.xgroup_create(JOURNAL, GROUP, id="0", mkstream=True)
    except redis.ResponseError:
        pass  # the group exists already
    pipe = client.pipeline(transaction=True)
    for entry in entries:
        pipe.xadd(JOURNAL, {"row": entry})
    if read_by:
        pipe.xreadgroup(GROUP, read_by, {JOURNAL: ">"}, count=1000)
    pipe.execute()
    client.close()


def _assert_dead_letters(tag: str, *, tries: int) -> None:
    from usage.models import UsageDeadLetter

    dead = {d.request_id: d for d in UsageDeadLetter.objects.all()}
    assert sorted(dead) == sorted(["", f"{tag}-wrong-type", f"{tag}-negative"])
    assert [dead[""].tries, dead[f"{tag}-wrong-type"].tries, dead[f"{tag}-negative"].tries] == [
        1 * tries,
        3 * tries,
        3 * tries,
    ]
    assert dead[""].row == "not a row at all \\u0000"
    assert dead[""].error.startswith("JSONDecodeError: ")
    assert dead[f"{tag}-wrong-type"].error == (
        "ValueError: Field 'group_id' expected a number but got 'abc'."
    )
    assert dead[f"{tag}-negative"].error.startswith("IntegrityError: ")
    assert "latency_ms" in dead[f"{tag}-negative"].error
    assert orjson.loads(dead[f"{tag}-negative"].row)["latency_ms"] == -1
    assert orjson.loads(dead[f"{tag}-wrong-type"].row)["group_id"] == "abc"


def test_a_gateway_dead_letters_unstorable_rows_and_stores_their_batch(
    transactional_db, spawn_gateway, own_redis
):
    from tests.support.tenants import make_tenant
    from usage.models import UsageDeadLetter

    gateway = spawn_gateway(REDIS_URL=own_redis.url, TOLLGATE_USAGE_FLUSH_MS="200")
    tenant = make_tenant()
    tag = f"gw-{uuid.uuid4().hex[:8]}"
    good, entries = _poisoned_batch(tenant, tag)

    _journal(own_redis.url, entries)

    rows = usage_rows([r["request_id"] for r in good], expect=len(good))
    wait_until(lambda: UsageDeadLetter.objects.count() == 3, what="three dead letters")
    wait_until(lambda: _journal_left(own_redis.url) == (0, 0), what="an empty journal")
    assert len(rows) == 6
    assert [r.model_requested for r in rows if r.request_id == f"{tag}-unclean"] == ["m" * 200]
    _assert_charged_exactly(tenant.group_id, rows)
    assert sum(r.provider_cost_micro + r.bandwidth_charge_micro for r in rows) == 546
    _assert_dead_letters(tag, tries=1)
    assert metric(gateway.url, DEAD_LETTERS) == 3.0


def test_the_drain_keeps_rows_while_the_database_is_down_then_dead_letters_only_poison(
    transactional_db, own_redis
):
    from django.db import OperationalError

    from core.metrics import REGISTRY
    from tests.support.tenants import make_tenant
    from usage.models import UsageDeadLetter, UsageLog
    from usage.writer import drain_journal_sync

    tenant = make_tenant()
    tag = f"drain-{uuid.uuid4().hex[:8]}"
    good, entries = _poisoned_batch(tenant, tag)
    counted = REGISTRY.get_sample_value(DEAD_LETTERS) or 0.0
    _journal(own_redis.url, entries)

    # The database refuses connections: no row is anyone's fault, so none is dead-lettered
    # and every entry stays in the journal.
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = free_port()
    try:
        try:
            drain_journal_sync(own_redis.url, idle_ms=0)
        except OperationalError:
            pass
        else:
            raise AssertionError("the drain stored rows into a database that is down")
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert _journal_left(own_redis.url) == (9, 9)
    assert UsageDeadLetter.objects.count() == 0
    assert REGISTRY.get_sample_value(DEAD_LETTERS) - counted == 0

    assert drain_journal_sync(own_redis.url, idle_ms=0) == 6

    rows = list(UsageLog.objects.filter(group_id=tenant.group_id))
    assert sorted(r.request_id for r in rows) == sorted(r["request_id"] for r in good)
    _assert_charged_exactly(tenant.group_id, rows)
    assert sum(r.provider_cost_micro + r.bandwidth_charge_micro for r in rows) == 546
    _assert_dead_letters(tag, tries=1)
    assert REGISTRY.get_sample_value(DEAD_LETTERS) - counted == 3
    assert _journal_left(own_redis.url) == (0, 0)

    # The same poison journaled again (a replay) adds to its dead letters' tries: no copies.
    _journal(own_redis.url, entries, read_by="replica-that-died")
    assert drain_journal_sync(own_redis.url, idle_ms=0) == 0
    _assert_dead_letters(tag, tries=2)
    assert REGISTRY.get_sample_value(DEAD_LETTERS) - counted == 6
    assert UsageLog.objects.filter(group_id=tenant.group_id).count() == 6
    _assert_charged_exactly(tenant.group_id, rows)
