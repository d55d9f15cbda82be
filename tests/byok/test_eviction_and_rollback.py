"""DELETE evicts fleet-wide before it returns; rollback is a switch, and old releases refuse."""

from __future__ import annotations

import subprocess
import sys

import openai
import pytest
from django.db import connection

from tests.byok.helpers import Byok, team_keys
from tests.support.processes import ROOT, child_database_url, child_env
from tests.support.profiles import PLATFORM_KEY
from tests.support.services import requires_redis

HELLO = [{"role": "user", "content": "hello there"}]


@requires_redis
def test_delete_evicts_the_key_from_every_replica_before_it_returns(stack, spawn_gateway):
    other = spawn_gateway()
    tenant = stack.tenant()
    [key_id] = team_keys(stack, tenant, "stub-openai", ["sk-team-doomed"])
    other.reload()
    via_other = openai.OpenAI(base_url=f"{other.url}/v1", api_key=tenant.api_key, max_retries=0)
    via_other.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert Byok(stack, tenant).delete(key_id).status_code == 204  # served by the first replica
    with pytest.raises(openai.RateLimitError) as refused:
        via_other.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert refused.value.body["code"] == "LM-3021"
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-doomed"]


@requires_redis
def test_an_added_key_serves_the_next_request_on_every_replica(stack, spawn_gateway):
    """No reload asked for: the add returns once every replica's pools hold the key."""
    other = spawn_gateway()
    tenant = stack.tenant()
    api = Byok(stack, tenant)
    via = {
        "first": stack.openai(tenant),
        "other": openai.OpenAI(base_url=f"{other.url}/v1", api_key=tenant.api_key, max_retries=0),
    }

    added = api.add("stub-openai", "fresh", "sk-team-fresh")
    assert added.status_code == 201, added.text
    for client in via.values():
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-fresh"] * 2

    stack.stub.clear()
    assert api.fallback("stub-openai", True).status_code == 200
    assert api.delete(added.json()["id"]).status_code == 204
    for client in via.values():  # the emptied pool now falls back to the platform's keys
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert [c["key"] for c in stack.stub.vendor_calls()] == [PLATFORM_KEY] * 2


def test_disabling_byok_serves_everyone_on_platform_keys_and_says_so(
    transactional_db, spawn_gateway, stub
):
    from tests.support.profiles import install_profiles
    from tests.support.services import clear_shared_state
    from tests.support.stacks import Stack

    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    gateway = spawn_gateway(GATEWAY_BYOK_ENABLED="false")
    stack = Stack(gateway=gateway, stub=stub)
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-inert"])

    answer = stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert answer.usage.completion_tokens == 8
    assert [c["key"] for c in stub.vendor_calls()] == [PLATFORM_KEY]
    assert "team key pools are inert" in gateway.log()
    gateway.stop()


def test_a_gateway_refuses_a_database_migrated_by_a_newer_release(transactional_db, tmp_path):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_migrations (app, name, applied) "
            "VALUES ('byok', '9999_from_a_newer_release', CURRENT_TIMESTAMP)"
        )
    try:
        from django.conf import settings

        result = subprocess.run(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--port", "0"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(
                DATABASE_URL=child_database_url(),
                SECRET_KEY=settings.SECRET_KEY,
                SEALING_KEYS=settings.SEALING_KEYS,
                TOLLGATE_VAR_DIR=str(tmp_path),
            ),
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM django_migrations WHERE name = '9999_from_a_newer_release'")
    assert result.returncode != 0
    assert "migrations this release does not know" in result.stdout + result.stderr
    assert "byok.9999_from_a_newer_release" in result.stdout + result.stderr
