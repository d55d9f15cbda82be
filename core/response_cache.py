"""What the control plane knows of the response cache (gateway/cache/): where an account's
answers are kept, and how a tenant's purge reaches them.

Keys are `tollgate:cache:<account>:<digest>`, so an account's answers are one prefix. A purge drops
them from the cache Redis directly (SCAN and UNLINK, never KEYS) and tells every gateway
replica over the bus, which drops them from its in-process store when it has one (the
embedded run); it returns once every listening replica has done so.
"""

from __future__ import annotations

import redis

from core import bus
from core.config import tollgate

PREFIX = "tollgate:cache:"
PURGE_BATCH = 500


def account_prefix(account_id: int) -> str:
    """Return the prefix every key of one account's cached answers starts with."""
    return f"{PREFIX}{account_id}:"


def purge_account(account_id: int) -> int:
    """Drop every cached answer of an account; return how many the cache Redis held."""
    dropped = 0
    url = tollgate().cache_redis_url
    if url:
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        try:
            batch: list[bytes] = []
            for key in client.scan_iter(match=f"{account_prefix(account_id)}*", count=1000):
                batch.append(key)
                if len(batch) >= PURGE_BATCH:
                    dropped += client.unlink(*batch)
                    batch = []
            if batch:
                dropped += client.unlink(*batch)
        finally:
            client.close()
    bus.publish(bus.Topic.CACHE_PURGE, {"account_id": account_id}, wait=True)
    return dropped
