"""bench/run.py's second floor at a tiny size, on PostgreSQL and Redis as docs/benchmarks.md
runs it: the rules floor answers every request, makes each request's round trips (one
rate-limit script, one hold committed, one usage row journaled: its own table and stream
count them), and the targets table reads it against the bare proxy and the gateway."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from bench import bare
from tests.support.bench_runs import bench_report
from tests.support.databases import admin_connection, url_of
from tests.support.services import requires_postgres, requires_redis

SCENARIOS = (
    "bare-openai", "rules-openai", "gw-openai", "rules-openai-stream", "bare-openai-serial",
    "rules-openai-serial",
)  # fmt: skip
N = 120
BENCH_REDIS_DB = 6  # the bench tests' own Redis database (tests/bench/test_scale_bench.py)

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def database_url():
    """A fresh database of this module's own on the test server, dropped afterwards."""
    name = f"{connection.settings_dict['NAME']}_floor"[:63]
    with admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield url_of(name)
    with admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def redis_url() -> str:
    return urlunsplit(urlsplit(settings.REDIS_URL)._replace(path=f"/{BENCH_REDIS_DB}"))


@pytest.fixture(scope="module")
def report(tmp_path_factory, database_url, redis_url) -> dict:
    out = tmp_path_factory.mktemp("rules") / "rules.json"
    args = [
        "--only", ",".join(SCENARIOS), "--n", str(N), "--c", "8", "--paced-streams", "0",
        "--database-url", database_url, "--redis-url", redis_url,
    ]  # fmt: skip
    return bench_report(args, out, timeout_s=280)


def test_every_request_through_the_rules_floor_succeeds(report):
    got = {r["name"]: (r["ok"], r["failed"], r["warmup_failed"]) for r in report["results"]}
    assert got == {
        name: ((N // 4 if name.endswith("serial") else N), 0, 0) for name in SCENARIOS
    }, report["output"]
    assert report["exit_code"] == 0, report["output"]


def test_each_request_made_the_rules_round_trips(report, database_url, redis_url):
    # Warm-up requests included: they go through the same floor.
    served = sum(r["ok"] + r["warmup"] for r in report["results"] if r["target"] == bare.RULES)
    with psycopg.connect(database_url) as db:
        held = db.execute(f"SELECT held FROM {bare.HOLDS} WHERE id = 1").fetchone()[0]
    journal = redis.Redis.from_url(redis_url)
    try:
        journaled = journal.xlen(bare.JOURNAL)
        admitted = int(journal.get(bare.RPM_KEY) or 0)
    finally:
        journal.close()
    # Every request: one hold (coalesced statements add each batch's size), one row journaled,
    # one admission counted. The bare proxy's and the gateway's requests touch none of them.
    assert (held, journaled, admitted) == (served, served, served)


def test_the_rules_floor_is_measured_as_a_process_of_its_own(report):
    by_name = {r["name"]: r for r in report["results"]}
    for name in ("rules-openai", "rules-openai-stream"):
        floor = by_name[name]
        assert floor["serving_cpu_ms_per_req"] == floor["gateway_cpu_ms_per_req"] > 0
    # Less than the gateway, which makes the same round trips and does its work besides. (Not
    # "more than the bare proxy": at this size each reading is a few 10 ms clock ticks, and the
    # round trips add about a quarter, less than a tick.)
    cpu = {name: by_name[name]["gateway_cpu_ms_per_req"] for name in SCENARIOS}
    assert 0 < cpu["rules-openai"] < cpu["gw-openai"]


def test_the_table_reads_the_rules_floor_against_both_neighbours(report):
    last = {t["name"]: t for t in report["targets"][-1]}
    by_name = {r["name"]: r for r in report["results"]}
    cpu = {name: by_name[name]["gateway_cpu_ms_per_req"] for name in SCENARIOS}
    assert last["cpu/req openai: rules / bare"]["value"] == cpu["rules-openai"] / cpu["bare-openai"]
    assert last["cpu/req openai: gw / rules"]["value"] == cpu["gw-openai"] / cpu["rules-openai"]
    serial = last["p50 one at a time: rules - bare (ms)"]
    assert serial["value"] == (
        by_name["rules-openai-serial"]["p50_ms"] - by_name["bare-openai-serial"]["p50_ms"]
    )
    assert {last[name]["met"] for name in last if last[name]["limit"] is None} == {None}
    assert "cpu/req openai: gw / rules" in report["stdout"]
