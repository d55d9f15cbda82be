"""Which services the run has (PostgreSQL, Redis), and the shared state tests reset."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest
from django.conf import settings

HAS_REDIS = bool(settings.REDIS_URL)
IS_POSTGRES = not settings.EMBEDDED and "postgresql" in str(settings.DATABASES["default"]["ENGINE"])

requires_redis = pytest.mark.skipif(not HAS_REDIS, reason="needs Redis: set REDIS_URL")
requires_postgres = pytest.mark.skipif(not IS_POSTGRES, reason="needs PostgreSQL: set DATABASE_URL")


def unavailable(reason: str) -> NoReturn:
    """A tool a test needs is missing: skip, or fail where every test must run (CI)."""
    if os.environ.get("TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(f"TEST_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def clear_shared_state() -> None:
    if not HAS_REDIS:
        return
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    patterns = (
        "tollgate:cb:*",
        "tollgate:rl:*",
        "tollgate:bench:*",
        "tollgate:wu:*",
        "tollgate:pk:*",
        "tollgate:cache:*",
    )
    for pattern in patterns:
        keys = list(client.scan_iter(pattern, count=1000))
        if keys:
            client.delete(*keys)
    client.close()


def delete_redis_keys(pattern: str) -> None:
    """Delete the keys matching `pattern` from the configured Redis."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(pattern, count=1000))
    if keys:
        client.delete(*keys)
    client.close()
