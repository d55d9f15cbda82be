"""Fixtures of the fast layer: components in this process, a clock the test moves, real Redis
(when REDIS_URL is set) through core.shared_state.SharedState, no server processes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from core import shared_state
from tests.support.clock import FakeClock
from tests.support.services import HAS_REDIS, delete_redis_keys


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tag() -> str:
    """A name part no other test uses: Redis keys of this test carry it."""
    return f"unit-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["process", "redis"])
def backend(request, settings, tag) -> Iterator[str]:
    """Run the test against the per-process fallback (no Redis) and against real Redis."""
    if request.param == "process":
        settings.REDIS_URL = ""
    elif not HAS_REDIS:
        pytest.skip("needs Redis: set REDIS_URL")
    yield request.param
    if request.param == "redis":
        delete_redis_keys(f"tollgate:*{tag}*")


@pytest.fixture
def redis_only(settings, tag) -> Iterator[None]:
    """Real Redis, for tests of what is shared through it; its keys are deleted after."""
    if not HAS_REDIS:
        pytest.skip("needs Redis: set REDIS_URL")
    yield
    delete_redis_keys(f"tollgate:*{tag}*")


@pytest.fixture
def tollgate(settings):
    """Override TOLLGATE_* settings for components built after the call: tollgate(REPLICAS=2)."""

    def override(**values) -> None:
        settings.TOLLGATE = {**settings.TOLLGATE, **values}

    return override


@pytest.fixture
def retry_redis_at_once(monkeypatch) -> None:
    """SharedState waits RETRY_AFTER_FAILURE_S of real time before trying Redis again after a
    failure; a test that restores Redis tries it on the next call instead."""
    monkeypatch.setattr(shared_state, "RETRY_AFTER_FAILURE_S", 0.0)
