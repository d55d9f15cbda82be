"""bench/run.py's guardrail scenarios at a tiny size, as docs/benchmarks.md runs them, on the
embedded defaults: every request succeeds, the gateway checks each guarded one with both
guardrails on the way in and out and finds nothing, each guarded scenario is set against its
twin, and what a request with no guardrail pays is measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import guarded
from tests.support.bench_runs import bench_report

ROOT = Path(__file__).resolve().parents[2]
COMMAND = (
    "python bench/run.py --only gw-openai,gw-openai-guarded,gw-openai-stream,"
    "gw-openai-stream-guarded --n 40 --c 4"
)
N = 40
WARMUP = N // 10  # the bench's warm-up: min(200, n/10) requests, not measured
SCENARIOS = ("gw-openai", "gw-openai-guarded", "gw-openai-stream", "gw-openai-stream-guarded")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("guarded") / "guarded.json"
    return bench_report(COMMAND.split()[2:], out, timeout_s=280)


def test_the_guarded_scenarios_run_right_after_their_twins(report):
    assert [r["name"] for r in report["results"]] == list(SCENARIOS)


def test_every_request_of_every_scenario_succeeds(report):
    got = {r["name"]: (r["n"], r["ok"], r["failed"], r["warmup_failed"]) for r in report["results"]}
    assert got == {name: (N, N, 0, 0) for name in SCENARIOS}, report["output"]
    assert {r["name"]: r["gateway_error_logs"] for r in report["results"]} == dict.fromkeys(
        SCENARIOS, 0
    )
    assert report["exit_code"] == 0, report["output"]


def test_the_gateway_checks_each_guarded_request_both_ways_and_finds_nothing(report):
    checked = 2 * (N + WARMUP)  # both guarded scenarios, warm-ups included
    assert report["guardrail_verdicts"] == {
        "detectors input flag clean": checked,
        "detectors output flag clean": checked,
        "custom input redact clean": checked,
        "custom output redact clean": checked,
    }


def test_each_guarded_scenario_is_set_against_its_twin(report):
    by_name = {r["name"]: r for r in report["results"]}
    rows = {row["scenario"]: row for row in report["guardrail_comparisons"]}
    assert set(rows) == {"gw-openai-guarded", "gw-openai-stream-guarded"}
    for name, row in rows.items():
        mine, twin = by_name[name], by_name[row["twin"]]
        assert row["twin"] == name.removesuffix("-guarded")
        assert row["cpu_ms_per_req"] == mine["gateway_cpu_ms_per_req"] > 0
        assert row["twin_cpu_ms_per_req"] == twin["gateway_cpu_ms_per_req"] > 0
        assert row["added_cpu_ms_per_req"] == pytest.approx(
            mine["gateway_cpu_ms_per_req"] - twin["gateway_cpu_ms_per_req"]
        )
        assert row["p50_ms"] == mine["p50_ms"] > 0
        assert row["twin_p50_ms"] == twin["p50_ms"] > 0
        assert row["added_p50_ms"] == pytest.approx(mine["p50_ms"] - twin["p50_ms"])
    assert (
        "Guardrails (gateway cpu/req and p50, ms): guarded vs its unguarded twin"
        in report["output"]
    )


def test_what_a_request_with_no_guardrail_pays_is_measured(report):
    cost = report["no_guardrail_cost"]
    assert set(cost) == {"calls", "rounds", "none_whole_us", "none_stream_us",
                         "guarded_whole_us", "guarded_stream_us", "matches"}  # fmt: skip
    assert (cost["calls"], cost["rounds"], cost["matches"]) == (200_000, 5, 0)
    assert 0 < cost["none_whole_us"] < cost["guarded_whole_us"]
    assert 0 < cost["none_stream_us"] < cost["guarded_stream_us"]
    assert "No guardrail attached (in one process, timeit, CPU per request): " in report["output"]


def test_the_guarded_scenarios_have_no_peer_twin():
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--peer", "litellm", "--only", "peer-openai-guarded"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown scenario(s) ['peer-openai-guarded']" in done.stderr


def test_a_bench_guardrail_that_matched_fails_the_run():
    clean = {"detectors input flag clean": 44.0, "custom output redact clean": 44.0}
    measured = {"matches": 0}

    assert guarded.problem(clean, measured) is None
    assert guarded.problem({**clean, "custom output redact matched": 1.0}, measured) == (
        "guardrail verdicts other than clean: custom output redact matched"
    )
    assert guarded.problem(clean, {"matches": 2}) == (
        "the bench guardrails match the prompt or answer 2 time(s)"
    )
    assert guarded.problem(clean, {"error": "bench/guarded.py failed (1): boom"}) == (
        "bench/guarded.py failed (1): boom"
    )
