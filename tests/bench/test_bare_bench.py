"""bench/run.py's floor at a tiny size, as docs/benchmarks.md runs it, on the embedded
defaults: the bare proxy answers every request of its scenarios and paced streams, it is
measured as its own process, and the targets table is each round's ratios to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bare
from tests.support.bench_runs import bench_report

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = (
    "stub-openai", "bare-openai", "gw-openai", "bare-openai-stream", "stub-openai-serial",
    "bare-openai-serial", "gw-openai-serial",
)  # fmt: skip
N = 160
STREAMS = 10
ROUNDS = 2
COMMAND = (
    f"python bench/run.py --only {','.join(SCENARIOS)} --n {N} --c 8 --paced-streams {STREAMS}"
    f" --paced-shapes openai --pace-ms 50 --rounds {ROUNDS}"
)

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bare") / "bare.json"
    return bench_report(COMMAND.split()[2:], out, timeout_s=380)


def test_every_request_through_the_bare_proxy_succeeds(report):
    got = {r["name"]: (r["ok"], r["failed"], r["warmup_failed"]) for r in report["results"]}
    serial = N // 4
    assert got == {
        name: ((serial if name.endswith("serial") else N), 0, 0) for name in SCENARIOS
    }, report["output"]
    paced = {(p["target"], p["ok"], p["failed"]) for p in report["paced"]}
    assert paced == {("stub", STREAMS, 0), ("bare", STREAMS, 0), ("gw", STREAMS, 0)}
    assert report["exit_code"] == 0, report["output"]


def test_the_bare_proxy_is_measured_as_a_process_of_its_own(report):
    by_name = {r["name"]: r for r in report["results"]}
    for name in ("bare-openai", "bare-openai-stream"):
        floor = by_name[name]
        assert floor["serving_cpu_ms_per_req"] == floor["gateway_cpu_ms_per_req"] > 0
        # The stub answered each forwarded request itself: its CPU is counted apart.
        assert floor["stub_cpu_ms_per_req"] > 0
    assert (
        by_name["bare-openai"]["gateway_cpu_ms_per_req"]
        < by_name["gw-openai"]["gateway_cpu_ms_per_req"]
    )


def test_the_targets_are_ratios_to_the_floor_in_the_same_round(report):
    assert len(report["targets"]) == ROUNDS
    last = {t["name"]: t for t in report["targets"][-1]}
    by_name = {r["name"]: r for r in report["results"]}  # the last round's
    gw, floor = by_name["gw-openai"], by_name["bare-openai"]
    cpu = last["cpu/req openai: gw / bare"]
    assert cpu["value"] == gw["gateway_cpu_ms_per_req"] / floor["gateway_cpu_ms_per_req"]
    assert (cpu["limit"], cpu["met"]) == (bare.CPU_RATIO_MAX, cpu["value"] <= 2.5)
    serial = last["p50 one at a time: gw - bare (ms)"]
    assert serial["value"] == (
        by_name["gw-openai-serial"]["p50_ms"] - by_name["bare-openai-serial"]["p50_ms"]
    )
    paced = {p["target"]: p for p in report["paced"]}
    floor_added = paced["bare"]["ttft_p50_ms"] - paced["stub"]["ttft_p50_ms"]
    gw_added = paced["gw"]["ttft_p50_ms"] - paced["stub"]["ttft_p50_ms"]
    burst = last[f"{STREAMS} streams openai: +ttft p50 gw / bare"]
    assert burst["value"] == (gw_added / floor_added if floor_added > 0 else None)
    # Memory counts the first time the gateway holds that many streams: round 1 here. The same
    # process reuses what round 1 freed, so the last round's reading is void, not a pass.
    memory = f"{STREAMS} streams openai: gw KB per stream"
    assert paced["gw"]["rss_reused"] is True
    assert last[memory]["value"] is None
    first = {t["name"]: t for t in report["targets"][0]}
    # A reading, not a void: ten streams may fit in memory the process already holds (0.0).
    assert first[memory]["value"] is not None and first[memory]["value"] >= 0
    assert last["gateway errors"]["value"] == 0.0


def test_the_table_shows_each_round_and_the_median(report):
    text = report["stdout"]
    header = next(line for line in text.splitlines() if line.startswith("issue 44 targets"))
    assert header.split()[3:] == ["round", "1", "round", "2", "median", "target", "verdict"]
    assert text.count("--- round ") == ROUNDS
