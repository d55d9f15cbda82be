"""Production refuses a Redis that keeps no append-only file, unless the operator says so:
the usage journal lives there, and a crash of such a Redis loses its measured rows."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings

from tests.support.processes import (
    ROOT,
    RedisServer,
    child_database_url,
    child_env,
    free_port,
    start_gateway,
)
from tests.support.services import requires_postgres, requires_redis

pytestmark = [requires_postgres, requires_redis]


def start_once(tmp_path, redis_url: str, persistence: str) -> subprocess.CompletedProcess:
    """Start the data plane on `redis_url` and return how it ended (within a timeout)."""
    env = child_env(
        DATABASE_URL=child_database_url(),
        REDIS_URL=redis_url,
        SECRET_KEY=settings.SECRET_KEY,
        SEALING_KEYS=settings.SEALING_KEYS,
        TOLLGATE_VAR_DIR=str(tmp_path),
        TOLLGATE_REDIS_PERSISTENCE=persistence,
    )
    command = [sys.executable, "-m", "uvicorn", "config.asgi:gateway_application", "--port", "0"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_a_redis_without_aof_stops_the_gateway_naming_the_setting(transactional_db, tmp_path):
    plain = RedisServer(port=free_port())
    plain.start()
    try:
        result = start_once(tmp_path, plain.url, "check")
    finally:
        plain.stop()
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Redis keeps no append-only file (appendonly is no)" in output
    assert "TOLLGATE_REDIS_PERSISTENCE=none" in output


@pytest.mark.parametrize(
    ("aof", "persistence"),
    [(True, "check"), (False, "none")],
    ids=["a Redis with AOF passes the check", "the operator runs without it on purpose"],
)
def test_the_gateway_starts_when_redis_persists_or_the_operator_says_so(
    transactional_db, tmp_path, aof, persistence
):
    server = RedisServer(port=free_port(), aof_dir=tmp_path if aof else None)
    server.start()
    try:
        gateway = start_gateway(
            tmp_path, REDIS_URL=server.url, TOLLGATE_REDIS_PERSISTENCE=persistence
        )
        gateway.stop()
    finally:
        server.stop()
    assert "append-only" not in gateway.log()
