"""The key lookup reads memory: the database is asked once per key, not once per request."""

from __future__ import annotations

import httpx

from accounts.models import ApiKey

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def ask(stack, key: str) -> int:
    return httpx.post(
        f"{stack.url}/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"}
    ).status_code


def test_a_cached_key_is_served_from_memory_without_the_database(stack):
    tenant = stack.tenant(invoiced=True)  # no wallet, no budget: no money step either
    assert ask(stack, tenant.api_key) == 200  # looked up once, now in the gateway's memory

    # Behind the gateway's back (no bus message): only a database read could notice.
    ApiKey.objects.filter(pk=tenant.api_key_id).update(key_hash="0" * 64)

    assert [ask(stack, tenant.api_key) for _ in range(5)] == [200] * 5
    stack.gateway.reload()  # the operator's reload (or the TTL) drops the cache
    assert ask(stack, tenant.api_key) == 401
