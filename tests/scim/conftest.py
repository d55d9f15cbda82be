import pytest

from tests.support.services import HAS_REDIS, delete_redis_keys


@pytest.fixture(autouse=True)
def fresh_token_throttle():
    """Each test starts with no wrong tokens counted against 127.0.0.1 (accounts/throttle.py
    keeps them in Redis for minutes, across tests)."""
    if HAS_REDIS:
        delete_redis_keys("tollgate:login:*")
