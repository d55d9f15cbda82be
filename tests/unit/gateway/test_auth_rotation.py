"""gateway.auth.PrincipalCache and a rotated key, in this process against the real database:
the previous secret is the same key until its grace end, then refused from memory; a lookup
that a rotation's eviction overtook reads the row again instead of keeping it for the TTL."""

from __future__ import annotations

import asyncio

import pytest

from accounts import rotation
from accounts.models import ApiKey
from accounts.secrets import hash_secret
from core.db import off_loop
from core.errors import Unauthorized
from gateway.auth import PrincipalCache
from tests.support.tenants import make_tenant
from tests.support.waits import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
ROTATED = "This key was rotated and its previous secret's grace ended."


def refusal(cache: PrincipalCache, secret: str) -> str | None:
    try:
        asyncio.run(cache.for_secret(secret))
    except Unauthorized as refused:
        return refused.message
    return None


def test_the_previous_secret_is_the_same_key_until_its_grace_end_then_refused_from_memory():
    tenant = make_tenant()
    done = rotation.api_key_rotate(api_key=ApiKey.objects.get(pk=tenant.api_key_id), grace_s=1)
    cache = PrincipalCache()

    old = asyncio.run(cache.for_secret(tenant.api_key))
    new = asyncio.run(cache.for_secret(done.secret))

    assert (old.api_key_id, old.group_id) == (new.api_key_id, new.group_id)
    assert old.api_key_id == tenant.api_key_id
    assert old.grace_ends_at == done.previous_valid_until.timestamp()
    assert new.grace_ends_at is None
    # Still in memory when the grace ends: the entry itself says it is over.
    assert wait_until(lambda: refusal(cache, tenant.api_key), timeout_s=5) == ROTATED
    assert refusal(cache, done.secret) is None


def test_a_lookup_overtaken_by_a_rotation_reads_the_key_again():
    tenant = make_tenant()
    cache = PrincipalCache()

    def rotate_now() -> None:
        rotation.api_key_rotate(api_key=ApiKey.objects.get(pk=tenant.api_key_id), grace_s=0)

    real_load = cache._load
    loads = []

    async def load_then_rotate(loader, arg):
        principal = await real_load(loader, arg)
        loads.append(principal)
        if len(loads) == 1:
            # The row was read; now the key is rotated with no grace and its bus message
            # arrives, before this lookup stores what it read.
            await off_loop(rotate_now)()
            cache.evict_key({"key_hashes": [hash_secret(tenant.api_key)]})
        return principal

    cache._load = load_then_rotate  # the real loads, with the rotation between read and store

    assert refusal(cache, tenant.api_key) == "Missing, unknown, revoked or expired API key."
    assert len(loads) == 2 and loads[1] is None
