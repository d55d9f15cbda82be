"""bench/run.py's response-cache scenarios at a tiny size, on the embedded defaults: every
measured hit says `X-Tollgate-Cache: hit`, every miss `miss`, and the cache comparison sets
each against its uncached twin."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench_runs import bench_report

ROOT = Path(__file__).resolve().parents[2]
N = 40
SERIAL_N = N // 4  # the bench's *-serial scenarios send n/4 requests one at a time
SCENARIOS = (
    "gw-openai",
    "gw-openai-miss",
    "gw-openai-hit",
    "gw-openai-stream",
    "gw-openai-stream-hit",
    "gw-openai-serial",
    "gw-openai-hit-serial",
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("cache") / "cache.json"
    args = ["--only", ",".join(SCENARIOS), "--n", str(N), "--c", "4", "--paced-streams", "0"]
    return bench_report(args, out, timeout_s=280)


def test_every_request_of_every_scenario_succeeds(report):
    got = {r["name"]: (r["n"], r["ok"], r["failed"], r["warmup_failed"]) for r in report["results"]}
    sent = {name: SERIAL_N if name.endswith("-serial") else N for name in SCENARIOS}
    assert got == {name: (n, n, 0, 0) for name, n in sent.items()}, report["output"]
    assert report["exit_code"] == 0, report["output"]


def test_a_hit_scenario_warms_up_before_it_measures(report):
    warmups = {r["name"]: r["warmup"] for r in report["results"]}
    assert warmups["gw-openai-hit"] == N // 10
    assert warmups["gw-openai-hit-serial"] == 1  # n/4 = 10 requests: n/10 of them is 1


def test_each_cache_scenario_is_set_against_its_uncached_twin(report):
    rows = [
        (c["scenario"], c["uncached"], c["miss"], c["target"]) for c in report["cache_comparisons"]
    ]
    assert rows == [
        ("gw-openai-miss", "gw-openai", None, "+cpu <= 0.05"),
        ("gw-openai-hit", "gw-openai", "gw-openai-miss", "cpu/miss <= 0.5"),
        ("gw-openai-stream-hit", "gw-openai-stream", None, "cpu/miss <= 0.5"),
        ("gw-openai-hit-serial", "gw-openai-serial", None, "+p50 <= 1"),
    ]
    by_name = {c["scenario"]: c for c in report["cache_comparisons"]}
    assert by_name["gw-openai-hit"]["cpu_share_of_miss"] is not None
    assert by_name["gw-openai-hit-serial"]["added_p50_ms"] is not None
    assert by_name["gw-openai-stream-hit"]["within_target"] is None  # no streamed miss ran
