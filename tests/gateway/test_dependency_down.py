"""LM-5004: with its database gone, a gateway refuses rather than serving unbilled.

PostgreSQL only: the test makes a database of its own, migrates and provisions it in a child
process, starts a gateway on it (without Redis, so nothing it journals reaches other
gateways), then drops the database under it with DROP DATABASE ... WITH (FORCE).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import httpx
import pytest
from django.conf import settings
from django.db import connection

from tests.support.metrics import metric
from tests.support.processes import ROOT, child_env
from tests.support.profiles import PLATFORM_KEY, stub_profiles
from tests.support.services import requires_postgres
from tests.support.waits import wait_until

PROVISION = """
import json, sys
import django
django.setup()
from django.core.management import call_command
from billing.services import tenant_provision
from providers.services import profile_set_platform_key
from providers.spec import profiles_bootstrap

call_command("migrate", verbosity=0, interactive=False)
spec, platform_key = json.loads(sys.argv[1]), sys.argv[2]
for profile in profiles_bootstrap(spec=spec):
    profile_set_platform_key(profile=profile, api_key=platform_key)
    profile.save()
keys = [tenant_provision(name=name, wallet_micro=100_000_000).api_key_secret
        for name in ("seen-before", "never-seen")]
keys.append(tenant_provision(name="invoiced", invoiced=True).api_key_secret)
print(json.dumps(keys))
"""


def admin_sql(statement: str) -> None:
    import psycopg

    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(statement)


def database_url(name: str) -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return (
        f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"
    )


@pytest.fixture
def doomed_database(stub):
    name = f"tollgate_doomed_{uuid.uuid4().hex[:8]}"
    admin_sql(f"CREATE DATABASE {name}")
    url = database_url(name)
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROVISION, json.dumps(stub_profiles(stub.url)), PLATFORM_KEY],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=child_env(
                DATABASE_URL=url,
                SECRET_KEY=settings.SECRET_KEY,
                SEALING_KEYS=settings.SEALING_KEYS,
                DJANGO_SETTINGS_MODULE="config.settings",
            ),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        yield name, url, json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        admin_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def ask_via(gateway, key: str, request_id: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    if request_id:
        headers["x-request-id"] = request_id
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        timeout=10,
        headers=headers,
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
    )


@requires_postgres
def test_a_dropped_database_makes_the_gateway_refuse_with_lm_5004(
    doomed_database, module_gateways, stub
):
    name, url, (seen_key, unseen_key, _) = doomed_database
    gateway = module_gateways(DATABASE_URL=url, REDIS_URL="")
    stub.clear()

    assert ask_via(gateway, seen_key).status_code == 200  # the key is now in the gateway's memory
    assert len(stub.vendor_calls()) == 1

    admin_sql(f"DROP DATABASE {name} WITH (FORCE)")

    unseen = ask_via(gateway, unseen_key)  # its key must be looked up: the database is gone
    assert (unseen.status_code, unseen.json()["error"]) == (
        503,
        {
            "message": "A Tollgate dependency is down; refusing rather than serving unbilled.",
            "type": "api_error",
            "code": "LM-5004",
        },
    )
    seen = ask_via(
        gateway, seen_key
    )  # known key, but its wallet hold cannot be taken: not served unbilled
    assert (seen.status_code, seen.json()["error"]["code"]) == (503, "LM-5004")
    assert len(stub.vendor_calls()) == 1
    ready = httpx.get(f"{gateway.url}/readyz", timeout=10)
    assert (ready.status_code, ready.json()) == (
        503,
        {"ready": False, "checks": {"database": False}},
    )


@requires_postgres
def test_the_gateway_serves_again_once_its_database_is_back(doomed_database, module_gateways, stub):
    name, url, (seen_key, unseen_key, _) = doomed_database
    gateway = module_gateways(DATABASE_URL=url, REDIS_URL="")
    stub.clear()

    assert [ask_via(gateway, seen_key).status_code for _ in range(4)] == [200] * 4

    # A database restart, as the gateway sees it: every connection it holds is cut.
    admin_sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )

    served = wait_until(
        lambda: (r := ask_via(gateway, unseen_key)).status_code == 200 and r,
        timeout_s=3,
        interval_s=0.1,
        what="the gateway to reconnect to its database",
    )
    assert served.json()["choices"][0]["message"]["content"].startswith("Hello")
    assert [ask_via(gateway, seen_key).status_code for _ in range(4)] == [200] * 4
    ready = httpx.get(f"{gateway.url}/readyz", timeout=10)
    assert (ready.status_code, ready.json()["checks"]) == (200, {"database": True})


@requires_postgres
def test_usage_needs_no_database_on_the_request_path(
    doomed_database, own_redis, module_gateways, stub
):
    """Rows are journaled in Redis: with the database unreachable, a known key of an account
    with no money step (invoiced, no budget) is still served, and every row lands later."""
    name, url, (_, unseen_key, invoiced_key) = doomed_database
    gateway = module_gateways(
        DATABASE_URL=url, REDIS_URL=own_redis.url, TOLLGATE_USAGE_CLAIM_IDLE_MS="300"
    )

    # The key is now in the gateway's memory.
    assert ask_via(gateway, invoiced_key, "before-outage").status_code == 200
    admin_sql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
    admin_sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )
    try:
        served = [
            ask_via(gateway, invoiced_key, f"during-outage-{index}").status_code
            for index in range(5)
        ]
        lookup = ask_via(gateway, unseen_key)  # proof the database is out of reach meanwhile
    finally:
        admin_sql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")

    assert served == [200] * 5
    assert (lookup.status_code, lookup.json()["error"]["code"]) == (503, "LM-5004")
    # Served without their crash marks (the database could not take them): counted.
    assert metric(gateway.url, "tollgate_unmarked_calls_total") == 5

    import psycopg

    def stored() -> list[str]:
        with psycopg.connect(url.replace("postgres://", "postgresql://")) as conn:
            rows = conn.execute(
                "SELECT client_request_id FROM usage_usagelog ORDER BY client_request_id"
            )
            return [row[0] for row in rows.fetchall()]

    expected = ["before-outage", *(f"during-outage-{index}" for index in range(5))]
    found = wait_until(
        lambda: (rows := stored()) == sorted(expected) and rows,
        timeout_s=20,
        what="every journaled row to reach the database",
    )
    assert found == sorted(expected)
