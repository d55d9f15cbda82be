"""Issue 44's targets table (bench/bare.py): each target is a ratio or a difference taken
within one round, the table shows every round and the median, and the verdict is the
median's."""

from __future__ import annotations

from dataclasses import dataclass

from bench import bare


@dataclass
class Row:  # the fields of bench/run.py's Result that the targets read
    name: str
    target: str
    gateway_cpu_ms_per_req: float | None = None
    p50_ms: float | None = None
    rps: float = 0.0
    failed: int = 0
    warmup_failed: int = 0
    gateway_error_logs: int = 0


@dataclass
class Paced:  # the fields of bench/paced.py's PacedResult that the targets read
    target: str
    shape: str
    n: int
    ttft_p50_ms: float | None
    rss_per_stream_kb: float | None = None
    rss_reused: bool = False
    failed: int = 0
    gateway_error_logs: int = 0


def a_round(gw_cpu: float, *, failed: int = 0, reused: bool = False) -> bare.Round:
    return bare.Round(
        [
            Row("bare-openai", "bare", gateway_cpu_ms_per_req=0.2),
            Row("gw-openai", "gw", gateway_cpu_ms_per_req=gw_cpu, failed=failed, rps=1000.0),
            Row("peer-openai", "peer", rps=80.0),
            Row("bare-openai-serial", "bare", p50_ms=0.9),
            Row("gw-openai-serial", "gw", p50_ms=2.4),
        ],
        [
            Paced("stub", "openai", 1000, ttft_p50_ms=600.0),
            Paced("bare", "openai", 1000, ttft_p50_ms=700.0, rss_per_stream_kb=9.0),
            Paced(
                "gw", "openai", 1000, ttft_p50_ms=950.0, rss_per_stream_kb=30.5, rss_reused=reused
            ),
        ],
    )


def by_name(targets: list[bare.Target]) -> dict[str, float | None]:
    return {t.name: t.value for t in targets}


def test_each_target_is_taken_within_its_round():
    assert by_name(bare.targets(a_round(0.5))) == {
        "cpu/req openai: gw / bare": 0.5 / 0.2,
        "cpu/req openai-stream: gw / bare": None,  # not run: no figure, no verdict
        "cpu/req anthropic: gw / bare": None,
        "cpu/req anthropic-stream: gw / bare": None,
        "p50 one at a time: gw - bare (ms)": 2.4 - 0.9,
        "1000 streams openai: +ttft p50 gw / bare": (950.0 - 600.0) / (700.0 - 600.0),
        "1000 streams openai: gw KB per stream": 30.5,
        "gateway errors": 0.0,
        "req/s openai: gw / LiteLLM": 1000.0 / 80.0,
    }


def test_memory_per_stream_counts_only_a_first_hold_of_that_many():
    # A later round's gateway reuses what the first round's streams freed: no reading.
    again = by_name(bare.targets(a_round(0.5, reused=True)))
    assert again["1000 streams openai: gw KB per stream"] is None
    text = bare.report([a_round(0.5), a_round(0.5, reused=True), a_round(0.5, reused=True)])
    line = next(x for x in text.splitlines() if x.startswith("1000 streams openai: gw KB"))
    assert line.split()[-7:] == ["30.50", "-", "-", "30.50", "≤", "32", "ok"]


def test_a_target_is_met_below_its_limit_or_above_it_for_a_floor():
    assert bare.Target("x", 2.5, 2.5).met() is True
    assert bare.Target("x", 2.51, 2.5).met() is False
    assert bare.Target("x", None, 2.5).met() is None
    assert bare.Target("x", 9.9, 10.0, at_least=True).met() is False
    assert bare.Target("x", 12.5, 10.0, at_least=True).met() is True


def test_the_report_shows_every_round_and_judges_the_median():
    text = bare.report([a_round(0.4), a_round(0.6), a_round(0.8, failed=2)])
    lines = {line.split("  ")[0]: line.split() for line in text.splitlines()}
    cpu = lines["cpu/req openai: gw / bare"]
    assert cpu[-7:] == ["2.00", "3.00", "4.00", "3.00", "≤", "2.5", "MISSED"]
    errors = lines["gateway errors"]
    assert errors[-7:] == ["0.00", "0.00", "2.00", "0.00", "≤", "0", "ok"]
    assert lines["cpu/req anthropic: gw / bare"][-7:] == ["-", "-", "-", "-", "≤", "2.5", "-"]
    assert lines["req/s openai: gw / LiteLLM"][-3:] == ["≥", "10", "ok"]
    assert text.splitlines()[0].split() == [
        "issue", "44", "targets", "round", "1", "round", "2", "round", "3", "median", "target",
        "verdict",
    ]  # fmt: skip


def test_the_rules_floor_is_read_against_both_neighbours_and_judged_by_nothing():
    one = a_round(0.5)
    one.results += [
        Row("rules-openai", "rules", gateway_cpu_ms_per_req=0.3),
        Row("rules-openai-serial", "rules", p50_ms=1.2),
    ]
    readings = {t.name: t for t in bare.targets(one) if t.limit is None}
    assert {name: t.value for name, t in readings.items()} == {
        "cpu/req openai: rules / bare": 0.3 / 0.2,
        "cpu/req openai: gw / rules": 0.5 / 0.3,
        "p50 one at a time: rules - bare (ms)": 1.2 - 0.9,
    }
    assert {t.met() for t in readings.values()} == {None}
    text = bare.report([one])
    line = next(x for x in text.splitlines() if x.startswith("cpu/req openai: gw / rules"))
    assert line.split()[-4:] == ["1.67", "1.67", "-", "-"]
    # Without the rules floor the table holds the targets alone.
    assert not [t for t in bare.targets(a_round(0.5)) if t.limit is None]
