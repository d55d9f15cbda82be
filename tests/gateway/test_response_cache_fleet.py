"""The response cache across processes: replicas share hits; a cache Redis of its own is capped
and, killed, only turns hits into misses; a tenant's purge reaches every replica; a team's hit
spends no platform money; the metrics count it all."""

from __future__ import annotations

import pytest

from core.response_cache import purge_account
from tests.gateway.test_response_cache import ask, cacheable_profiles, vendor_calls
from tests.support.processes import RedisServer, free_port
from tests.support.profiles import install_profiles
from tests.support.stacks import Stack, own_stack
from tests.support.usage import settled, usage_rows
from tests.support.waits import wait_until


@pytest.fixture
def cached(stack):
    install_profiles(stack.stub.url, cacheable_profiles(stack.stub.url))
    stack.gateway.reload()
    return stack


def test_two_replicas_share_hits_and_a_purge_empties_both(cached, gateway_factory):
    other = Stack(gateway=gateway_factory(), stub=cached.stub)
    other.gateway.reload()
    tenant = cached.tenant()

    assert ask(cached.openai(tenant))[0]["x-tollgate-cache"] == "miss"
    assert ask(other.openai(tenant))[0]["x-tollgate-cache"] == "hit"
    assert vendor_calls(cached) == 1

    assert purge_account(tenant.account_id) == 1
    assert ask(other.openai(tenant))[0]["x-tollgate-cache"] == "miss"
    assert ask(cached.openai(tenant))[0]["x-tollgate-cache"] == "hit"
    assert vendor_calls(cached) == 2


def test_a_cache_redis_of_its_own_is_capped_and_killed_only_turns_hits_into_misses(
    transactional_db, gateway_factory, stub, tmp_path
):
    import redis

    from tests.support.metrics import metric

    cache_redis = RedisServer(port=free_port())
    cache_redis.start()
    try:
        stack = own_stack(
            gateway_factory(
                TOLLGATE_CACHE_REDIS_URL=cache_redis.url, TOLLGATE_CACHE_MEMORY_MB="32"
            ),
            stub,
            cacheable_profiles(stub.url),
        )
        config = redis.Redis.from_url(cache_redis.url).config_get("maxmemory*")
        assert config["maxmemory"] == str(32 * 1024 * 1024)
        assert config["maxmemory-policy"] == "allkeys-lru"
        tenant = stack.tenant()
        client = stack.openai(tenant)
        assert ask(client)[0]["x-tollgate-cache"] == "miss"
        assert ask(client)[0]["x-tollgate-cache"] == "hit"
        assert redis.Redis.from_url(cache_redis.url).dbsize() == 1  # the answer, and only there

        cache_redis.stop()  # SIGKILL
        headers, answer = ask(client)
        assert headers["x-tollgate-cache"] == "miss" and answer.choices[0].message.content
        assert metric(stack.url, "tollgate_cache_lookups_total", route="chat", outcome="error") >= 1

        # Back, empty: the gateway tries it again within a second; until then misses (kept
        # nowhere), then one kept, then a hit.
        cache_redis.start()
        wait_until(
            lambda: ask(client)[0]["x-tollgate-cache"] == "hit", what="hits from the cache again"
        )
        rows = usage_rows(group_id=tenant.group_id, expect=vendor_calls(stack) + 2)
        assert all(row.status == 200 for row in rows)
        # In the order the requests came: a row whose journal write timed out on a busy
        # machine is stored from the process's own queue, after later rows.
        statuses = [row.cache_status for row in sorted(rows, key=lambda row: row.created_at)]
        assert statuses[:3] == ["miss", "hit", "miss"] and statuses[-1] == "hit"
        assert set(statuses[3:-1]) == {"miss"}
        assert metric(stack.url, "tollgate_cache_lookups_total", route="chat", outcome="hit") == 2
        assert metric(stack.url, "tollgate_cache_stores_total", outcome="stored") >= 2
        hits = [row for row in settled(tenant, len(rows)) if row.cache_status == "hit"]
        assert metric(stack.url, "tollgate_cache_saved_micro_usd_total") == sum(
            row.uncached_cost_micro - row.provider_cost_micro for row in hits
        )
    finally:
        cache_redis.stop()


def test_a_team_key_answers_hit_spends_no_platform_money(cached):
    from accounts.models import Group
    from billing.models import Wallet
    from byok.services import team_key_add

    tenant = cached.tenant()
    group = Group.objects.get(pk=tenant.group_id)
    team_key_add(group=group, provider="stub-openai", label="team", key="sk-team-cache-1")
    balance = Wallet.objects.get(account_id=tenant.account_id).balance_micro
    client = cached.openai(tenant)

    assert ask(client)[0]["x-tollgate-cache"] == "miss"
    assert ask(client)[0]["x-tollgate-cache"] == "hit"
    assert [call["key"] for call in cached.stub.calls() if call["model"]] == ["sk-team-cache-1"]

    miss, hit = settled(tenant, 2)
    assert (miss.served_by, hit.served_by) == ("team", "team")
    assert (hit.provider_cost_micro, hit.tokens_in, hit.byok_tokens_in) == (
        0,
        0,
        miss.byok_tokens_in,
    )
    assert hit.uncached_cost_micro > 0  # what the team's own vendor bill was spared
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == balance
    assert usage_rows(group_id=tenant.group_id, expect=2)[1].attempts[0].source == (
        "cache:gpt-4o-mini:team"
    )


def test_ttl_header_is_capped_by_the_models_maximum(stack):
    install_profiles(stack.stub.url, cacheable_profiles(stack.stub.url, cache_max_ttl_s=60))
    stack.gateway.reload()
    import redis
    from django.conf import settings

    tenant = stack.tenant()
    ask(stack.openai(tenant), headers={"X-Tollgate-Cache-TTL": "86400"})
    client = redis.Redis.from_url(settings.REDIS_URL)
    [key] = list(client.scan_iter(f"tollgate:cache:{tenant.account_id}:*"))
    assert 55 <= client.ttl(key) <= 60


def test_a_full_redis_refuses_the_answer_without_failing_the_batch_it_rides_in():
    """The write that rides with the usage journal is a script whose refusal is a reply."""
    import asyncio

    import redis

    from core.shared_state import SharedState
    from gateway.cache.stage import Kept

    full = RedisServer(port=free_port())
    full.start()
    try:
        client = redis.Redis.from_url(full.url)
        client.config_set("maxmemory-policy", "noeviction")
        client.set("filler", b"x" * 2_000_000)
        client.config_set("maxmemory", "1mb")
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.set("plain", b"v")

        async def write() -> list:
            shared = SharedState()
            shared.use(full.url)
            try:
                kept = Kept("tollgate:cache:1:k", b"answer", 60)
                return await shared.run(("PING",), kept.command())
            finally:
                await shared.close()

        assert asyncio.run(write()) == [b"PONG", 0]
        assert client.exists("tollgate:cache:1:k") == 0
        client.config_set("maxmemory", "0")
        assert asyncio.run(write()) == [b"PONG", 1]
        assert client.get("tollgate:cache:1:k") == b"answer"
    finally:
        full.stop()
