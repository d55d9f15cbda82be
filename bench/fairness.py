"""Tenant fairness: a victim tenant's latency alone, then while another tenant floods.

``python bench/run.py --fairness`` (see run.py's docstring) runs this instead of the
throughput scenarios.  Two tenants (``create_tenant``), each a group with its own virtual
key and a real request-per-minute limit: the *victim* (``--fair-victim-rpm``, comfortable)
and the *flooder* (``--fair-flood-rpm`` = L).  One gateway worker, as in the other scenarios;
both groups have a (far) budget, so the victim's requests take the whole path, hold included.

Each round is two (or three) phases of ``--fair-phase-s`` seconds (whole minutes), back to
back and starting on a minute boundary, so each phase covers whole rate windows (the limiter
counts fixed one-minute windows from Unix time 0):

* ``solo``: the victim alone, open loop: ``--fair-victim-rps`` non-streamed requests per
  second at fixed send times (a request is sent on time however many are outstanding).
* ``control`` (``--fair-control`` only): the same, while the flooder's process sends GET
  /healthz at the flood's rate (HTTP work in the gateway, no auth, limits or usage row).
* ``flood``: the same victim load while the flooder sends ``--fair-flood-factor`` x L per
  minute, also open loop, from its own process (so its answers do not delay the victim's
  event loop).  Within each window the first L flooder requests are admitted (answered by
  the stub); every later one must be refused 429 ``LM-3001`` in our error format
  (``{"error": {"message", "type": "rate_limit_error", "code": "LM-3001"}}``) with a
  ``Retry-After``.  Refusals are expected and counted, not failures.
  ``--fair-flood-concurrency N`` also gives the flooder group a concurrency_limit (its
  LM-3003 refusals are then expected too).

Checks: every victim request succeeds (status 200, 8 completion tokens); every flooder
answer is either such a 200 or such a refusal; the flooder's admitted count is exactly
min(L, sent) in each window it flooded, so L at 10 x L (at most that with a concurrency
limit); the gateway logs no ERROR line (WARNING lines, e.g. a Redis call over its timeout,
are printed).  Verdict: victim p99 under flood / solo p99 <= ``--fair-max-ratio`` (1.20):
PASS, else FAIL (all rounds pooled; each round's ratio is shown too).

Figures (victim latency is client side, from sending to the end of the body):

* the victim's p50/p99/max per phase, and its send lag (how late the open-loop sender was);
  in a flood phase also split into the *burst* (from the window's start until the
  flooder's last admitted request was answered) and the *rest* (the flooder only refused),
  with the gateway main thread's CPU in each (sampled every 0.25 s);
* the flooder's sent / admitted / refused counts, when it was first refused, latencies;
* CPU (% of one core, over the phase): the gateway (/proc, all threads) and its main thread
  (the event loop; the others run the database work, e.g. the usage writer storing every
  request's row, refusals' included), the Redis server (INFO: the whole server, shared),
  this database's PostgreSQL backends (when local), the host (all cores, everyone's);
* per request: the gateway's CPU per victim request alone, and per refusal = (flood-phase
  CPU - idle - victim and admitted requests at that cost) / refusals, for the whole process
  and its main thread; the idle CPU is measured for a few seconds before the first round.

``--json`` also writes every request's send time and latency (victim and flooder) and the
gateway CPU samples, per phase.  The Redis database given is cleared of ``tollgate:*`` keys
first: a fresh database reuses group ids, so a previous run's rate windows would otherwise
count against this one's groups.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

# run.py's helpers. run.py imports this module; as a script it is `__main__`, so this
# loads it once more as `run`, which is harmless: importing it does nothing else. The
# imports are circular, so nothing here uses `bench` at import time.
import run as bench

CHAT_PATH = "/v1/chat/completions"
WINDOW_S = 60  # gateway/limits.py: fixed one-minute windows counted from Unix time 0
VICTIM = "fair-victim"
FLOODER = "fair-flooder"
BUDGET_MICRO = 10**15  # a budget far away: the hold runs (as in the other scenarios), never refuses
WALLET_MICRO = 10**10
WARMUP_REQUESTS = 50
FLOOD_WARMUP_REQUESTS = 10
SETTLE_S = 1.0
NEAR_FLUSH_S = 0.2  # "near a flush": a request started this soon after a usage batch began
MIN_IDLE_S = 3.0
CPU_SAMPLE_S = 0.25
# The flooder sends from a window's start + 0.05 s to its end - 0.25 s: none lands in the next.
FLOOD_MARGIN_S = (0.05, 0.25)
FLOOD_POOL = 256  # the flooder's connection pool


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fairness scenario (--fairness)")
    g.add_argument(
        "--fairness",
        action="store_true",
        help="run the tenant fairness scenario instead of the throughput scenarios",
    )
    g.add_argument(
        "--fair-victim-rps",
        type=float,
        default=20.0,
        help="victim requests per second, open loop (default 20)",
    )
    g.add_argument(
        "--fair-victim-rpm",
        type=int,
        default=6000,
        help="the victim group's rpm_limit (default 6000)",
    )
    g.add_argument(
        "--fair-flood-rpm",
        type=int,
        default=1200,
        help="the flooder group's rpm_limit L (default 1200)",
    )
    g.add_argument(
        "--fair-flood-factor",
        type=float,
        default=10.0,
        help="the flooder sends this many times L per minute (default 10)",
    )
    g.add_argument(
        "--fair-phase-s",
        type=int,
        default=60,
        help="seconds per phase, a multiple of 60 (default 60)",
    )
    g.add_argument(
        "--fair-rounds", type=int, default=1, help="solo+flood rounds in one run (default 1)"
    )
    g.add_argument(
        "--fair-flood-concurrency",
        type=int,
        default=None,
        help="the flooder group's concurrency_limit (default none; LM-3003 refusals then)",
    )
    g.add_argument(
        "--fair-control",
        action="store_true",
        help="add a control phase per round: the flooder's rate, as GET /healthz",
    )
    g.add_argument(
        "--fair-max-ratio",
        type=float,
        default=1.20,
        help="PASS when flood p99 / solo p99 is at most this (default 1.20)",
    )


def check_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.fairness:
        return
    if args.fair_phase_s < WINDOW_S or args.fair_phase_s % WINDOW_S:
        p.error("--fair-phase-s must be a positive multiple of 60 (whole rate windows)")
    if min(args.fair_victim_rps, args.fair_flood_factor) <= 0 or args.fair_rounds < 1:
        p.error("--fair-victim-rps, --fair-flood-factor and --fair-rounds must be positive")
    if min(args.fair_victim_rpm, args.fair_flood_rpm) < 1:
        p.error("--fair-victim-rpm and --fair-flood-rpm must be positive")
    if args.fair_flood_concurrency is not None and args.fair_flood_concurrency < 1:
        p.error("--fair-flood-concurrency must be positive")
    if args.fair_victim_rps * 60 >= args.fair_victim_rpm:
        p.error("the victim must stay under its own limit: --fair-victim-rps * 60 < rpm")


# --------------------------------------------------------------------------- requests


def chat_body() -> bytes:
    return orjson.dumps(
        {
            "model": bench.OPENAI_MODEL,
            "messages": [{"role": "user", "content": bench.PROMPT}],
            "max_tokens": 256,
            "stream": False,
        }
    )


def chat_headers(key: str) -> dict[str, str]:
    return {"content-type": "application/json", "authorization": f"Bearer {key}"}


@functools.cache
def answer_problem() -> Any:
    """run.py's check of a non-streamed OpenAI answer (built on first use: see the import)."""
    return bench.openai_check(bench.DEFAULT_WORDS, False)


REFUSALS = {"LM-3001": "refused", "LM-3003": "capped"}  # rate limit; concurrency cap


def refusal_kind(status: int, headers: Any, body: bytes) -> str:
    """ "refused" for our LM-3001 rate-limit refusal ("capped": LM-3003, the group's
    concurrency cap), in our error format with a Retry-After; else what is wrong with it."""
    if status != 429:
        return f"HTTP {status}"
    try:
        err = orjson.loads(body)["error"]
        code, etype, message = err["code"], err["type"], err["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "429 not in our error format"
    if code not in REFUSALS:
        return f"429 {code}"
    if etype != "rate_limit_error" or not isinstance(message, str) or not message:
        return f"429 {code} with a wrong type or message"
    retry = headers.get("retry-after", "")
    if not retry.isdigit() or not 1 <= int(retry) <= WINDOW_S:
        return f"429 {code} with Retry-After {retry!r}"
    return REFUSALS[code]


@dataclass
class Sample:
    """One request: when it was due and sent (wall clock), how it ended."""

    due: float
    sent: float
    latency: float | None  # seconds; None when it failed
    outcome: str  # "ok", "refused", or what went wrong


async def paced(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: bytes | None,
    *,
    rate: float,
    start: float,
    end: float,
    classify: Any,
) -> list[Sample]:
    """Send at `rate` per second at fixed times from wall time `start` until `end`, open loop
    (a POST of `body`, or a GET without one)."""
    offset = time.time() - time.perf_counter()
    samples: list[Sample] = []
    tasks: list[asyncio.Task] = []

    async def one(due_pc: float) -> None:
        t0 = time.perf_counter()
        try:
            async with session.request(
                "GET" if body is None else "POST", url, data=body, headers=headers
            ) as resp:
                data = await resp.read()
                elapsed = time.perf_counter() - t0
                outcome = classify(resp.status, resp.headers, data)
        except TimeoutError:
            elapsed, outcome = None, "timeout"
        except aiohttp.ClientError as exc:
            elapsed, outcome = None, type(exc).__name__
        if outcome not in ("ok", "refused", "capped"):
            elapsed = None
        samples.append(Sample(due_pc + offset, t0 + offset, elapsed, outcome))

    n = max(0, math.ceil((end - start) * rate - 1e-9))
    start_pc = start - offset
    for i in range(n):
        due = start_pc + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.get_running_loop().create_task(one(due)))
    if tasks:
        await asyncio.gather(*tasks)
    samples.sort(key=lambda s: s.due)
    return samples


def classify_victim(status: int, headers: Any, body: bytes) -> str:
    if status != 200:
        return f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
    return answer_problem()(body) or "ok"


def classify_health(status: int, headers: Any, body: bytes) -> str:
    return "ok" if status == 200 and body == b'{"status":"ok"}' else f"HTTP {status}"


def classify_flood(status: int, headers: Any, body: bytes) -> str:
    if status == 200:
        return answer_problem()(body) or "ok"
    return refusal_kind(status, headers, body)


def quantile_ms(values: list[float], q: float) -> float | None:
    return bench.ms(bench.percentile(values, q))


# --------------------------------------------------------------------------- the flooder


@dataclass
class FloodPhase:
    kind: str  # "flood": chat requests; "control": GET /healthz at the same rate
    start: float
    end: float
    sent: int = 0
    admitted: int = 0
    refused: int = 0  # LM-3001
    capped: int = 0  # LM-3003: only with --fair-flood-concurrency
    other: dict[str, int] = field(default_factory=dict)
    admitted_by_window: dict[str, int] = field(default_factory=dict)
    sent_by_window: dict[str, int] = field(default_factory=dict)
    first_refusal: float | None = None  # wall time the first refused request was sent
    last_admitted_done: float | None = None  # wall time the last admitted one was answered
    admitted_p50_ms: float | None = None
    admitted_p99_ms: float | None = None
    refused_p50_ms: float | None = None
    refused_p99_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    client_cpu_ms: float = 0.0
    # (seconds from the phase's start, latency ms or None, "a"dmitted / "r"efused / "x")
    series: list[tuple[float, float | None, str]] = field(default_factory=list)


async def flood(plan: dict[str, Any]) -> dict[str, Any]:
    url, headers, rate = plan["base"] + CHAT_PATH, chat_headers(plan["key"]), plan["rate"]
    timeout = aiohttp.ClientTimeout(total=bench.REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=FLOOD_POOL, limit_per_host=FLOOD_POOL)
    phases: list[FloodPhase] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        now = time.time()
        warm = await paced(
            session,
            url,
            headers,
            chat_body(),
            rate=20.0,
            start=now,
            end=now + FLOOD_WARMUP_REQUESTS / 20.0,
            classify=classify_flood,
        )
        warm_bad = Counter(s.outcome for s in warm if s.outcome not in ("ok", "refused", "capped"))
        for start, end, kind in plan["phases"]:
            delay = start - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            cpu0 = bench.own_cpu_ms()
            control = kind == "control"
            samples = await paced(
                session,
                plan["base"] + "/healthz" if control else url,
                {} if control else headers,
                None if control else chat_body(),
                rate=rate,
                start=start + FLOOD_MARGIN_S[0],
                end=end - FLOOD_MARGIN_S[1],
                classify=classify_health if control else classify_flood,
            )
            phase = FloodPhase(kind, start, end, client_cpu_ms=bench.own_cpu_ms() - cpu0)
            phase.sent = len(samples)
            phase.series = [
                (
                    *series_point(s, start),
                    {"ok": "a", "refused": "r", "capped": "c"}.get(s.outcome, "x"),
                )
                for s in samples
            ]
            by_window: Counter[str] = Counter()
            phase.sent_by_window = dict(Counter(str(int(s.sent // WINDOW_S)) for s in samples))
            admitted_lat: list[float] = []
            refused_lat: list[float] = []
            for s in samples:
                if s.outcome == "ok":
                    assert s.latency is not None  # paced() times every ok and refused one
                    phase.admitted += 1
                    done = s.sent + s.latency
                    phase.last_admitted_done = max(phase.last_admitted_done or done, done)
                    by_window[str(int(s.sent // WINDOW_S))] += 1
                    admitted_lat.append(s.latency)
                elif s.outcome == "capped":
                    phase.capped += 1
                elif s.outcome == "refused":
                    phase.refused += 1
                    assert s.latency is not None
                    refused_lat.append(s.latency)
                    if phase.first_refusal is None:
                        phase.first_refusal = s.sent
                else:
                    phase.other[s.outcome] = phase.other.get(s.outcome, 0) + 1
            phase.admitted_by_window = dict(by_window)
            phase.admitted_p50_ms = quantile_ms(admitted_lat, 0.5)
            phase.admitted_p99_ms = quantile_ms(admitted_lat, 0.99)
            phase.refused_p50_ms = quantile_ms(refused_lat, 0.5)
            phase.refused_p99_ms = quantile_ms(refused_lat, 0.99)
            lags = [s.sent - s.due for s in samples]
            phase.lag_p99_ms = quantile_ms(lags, 0.99)
            phase.lag_max_ms = bench.ms(max(lags, default=None))
            phases.append(phase)
    return {"warmup_failures": dict(warm_bad), "phases": [asdict(p) for p in phases]}


def flood_child_main(argv: list[str]) -> int:
    """The flooder's own process: argv[0] is its plan (JSON); prints its tallies (JSON)."""
    plan = json.loads(argv[0])
    out = bench.run_loop(lambda: flood(plan))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


# --------------------------------------------------------------------------- setup


@dataclass
class Tenants:
    victim_key: str
    victim_group: int
    flooder_key: str
    flooder_group: int


def clear_redis(redis_url: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match="tollgate:*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        return len(keys)
    finally:
        client.close()


def postgres_cpu_ms(database_url: str | None) -> dict[int, float] | None:
    """CPU (ms) of each PostgreSQL backend serving this run's database (None: not local)."""
    if not database_url:
        return None
    import psycopg

    try:
        with psycopg.connect(database_url, connect_timeout=2) as conn:
            pids = [
                row[0]
                for row in conn.execute(
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ]
    except psycopg.Error:
        return None
    ticks = {pid: bench._proc_stat(pid) for pid in pids}
    out = {pid: t[1] * 1000.0 / bench.CLK_TCK for pid, t in ticks.items() if t is not None}
    return out or None


def postgres_delta_ms(before: dict[int, float] | None, after: dict[int, float] | None):
    """CPU the backends used in between: a backend that connected since counts whole."""
    if before is None or after is None:
        return None
    return sum(ms - before.get(pid, 0.0) for pid, ms in after.items())


def redis_cpu_ms(redis_url: str | None) -> float | None:
    if not redis_url:
        return None
    import redis

    try:
        client = redis.Redis.from_url(redis_url)
        info = client.info("cpu")
        client.close()
    except redis.RedisError:
        return None
    return (float(info["used_cpu_user"]) + float(info["used_cpu_sys"])) * 1000.0


def loop_thread_cpu_ms(pid: int) -> float:
    """User+system CPU (ms) of a process's main thread: the gateway's event loop."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return 0.0
    rest = data[data.rindex(b")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) * 1000.0 / bench.CLK_TCK


def host_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def create_tenants(args: argparse.Namespace, env: dict[str, str]) -> Tenants:
    made = {}
    for name in (VICTIM, FLOODER):
        out = bench.run_manage(
            ["create_tenant", "--name", name, "--wallet-micro", str(WALLET_MICRO), "--json"], env
        )
        lines = [x for x in out.splitlines() if x.strip().startswith("{")]
        if not lines:
            raise RuntimeError(f"create_tenant {name} printed no JSON")
        made[name] = json.loads(lines[-1])
    v, f = made[VICTIM], made[FLOODER]
    bench.run_manage(
        [
            "shell",
            "-c",
            "from accounts.models import Group; "
            f"n = Group.objects.filter(pk={int(v['group_id'])}).update("
            f"rpm_limit={args.fair_victim_rpm}, budget_max_micro={BUDGET_MICRO}); "
            f"m = Group.objects.filter(pk={int(f['group_id'])}).update("
            f"rpm_limit={args.fair_flood_rpm}, budget_max_micro={BUDGET_MICRO}, "
            f"concurrency_limit={args.fair_flood_concurrency}); "
            "assert n == m == 1, (n, m)",
        ],
        env,
    )
    return Tenants(v["api_key"], int(v["group_id"]), f["api_key"], int(f["group_id"]))


# --------------------------------------------------------------------------- the run


@dataclass
class Phase:
    round: int
    kind: str  # "solo" or "flood"
    start: float
    end: float
    victim_sent: int = 0
    victim_ok: int = 0
    victim_failures: dict[str, int] = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    lag_p99_ms: float | None = None
    # flood phases: the victim while the flooder was being admitted (the window's start,
    # until its first refusal), and afterwards
    burst_s: float | None = None
    burst_n: int = 0
    burst_p50_ms: float | None = None
    burst_p99_ms: float | None = None
    rest_n: int = 0
    rest_p50_ms: float | None = None
    rest_p99_ms: float | None = None
    gateway_cpu_ms: float = 0.0
    gateway_loop_cpu_ms: float = 0.0  # its main thread; the rest is its other threads (the DB's)
    redis_cpu_ms: float | None = None
    postgres_cpu_ms: float | None = None  # this database's backends (those alive at both ends)
    host_busy_pct: float | None = None  # all cores, everyone's processes (this host is shared)
    client_cpu_ms: float = 0.0
    gateway_error_logs: int = 0
    gateway_error_examples: list[str] = field(default_factory=list)
    gateway_warning_logs: int = 0  # e.g. "Redis unavailable": limits judged per process
    gateway_warning_examples: list[str] = field(default_factory=list)
    flood: dict[str, Any] | None = None
    latencies: list[float] = field(default_factory=list, repr=False)
    # (seconds from the phase's start to the send, latency ms or None): in the JSON only
    series: list[tuple[float, float | None]] = field(default_factory=list, repr=False)
    cpu_series: list[tuple[float, float, float]] = field(default_factory=list, repr=False)
    usage: dict[str, Any] | None = None  # see usage_figures
    burst_loop_cpu_pct: float | None = None  # the gateway's main thread during the burst
    rest_loop_cpu_pct: float | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start


def victim_figures(phase: Phase, samples: list[Sample]) -> None:
    phase.victim_sent = len(samples)
    phase.series = [series_point(s, phase.start) for s in samples]
    fails: Counter[str] = Counter()
    for s in samples:
        if s.outcome == "ok":
            assert s.latency is not None  # paced() times every ok one
            phase.latencies.append(s.latency)
        else:
            fails[s.outcome[:120]] += 1
    phase.victim_ok = len(phase.latencies)
    phase.victim_failures = dict(fails)
    phase.p50_ms = quantile_ms(phase.latencies, 0.5)
    phase.p99_ms = quantile_ms(phase.latencies, 0.99)
    phase.max_ms = bench.ms(max(phase.latencies, default=None))
    phase.lag_p99_ms = quantile_ms([s.sent - s.due for s in samples], 0.99)


def series_point(s: Sample, start: float) -> tuple[float, float | None]:
    return round(s.sent - start, 4), None if s.latency is None else round(s.latency * 1000, 2)


def split_burst(phase: Phase, samples: list[Sample]) -> None:
    """Victim figures while the flooder's admitted requests were in the gateway, and after."""
    first = (phase.flood or {}).get("last_admitted_done")
    if first is None:
        return
    phase.burst_s = first - phase.start
    phase.burst_loop_cpu_pct = cpu_pct_between(phase, 0.0, phase.burst_s)
    phase.rest_loop_cpu_pct = cpu_pct_between(phase, phase.burst_s, phase.seconds)
    # An ok one always has its latency (paced()): `is not None` only says so to mypy.
    ok = [(s.sent, s.latency) for s in samples if s.outcome == "ok" and s.latency is not None]
    burst = [latency for sent, latency in ok if sent < first]
    rest = [latency for sent, latency in ok if sent >= first]
    phase.burst_n, phase.rest_n = len(burst), len(rest)
    phase.burst_p50_ms, phase.burst_p99_ms = quantile_ms(burst, 0.5), quantile_ms(burst, 0.99)
    phase.rest_p50_ms, phase.rest_p99_ms = quantile_ms(rest, 0.5), quantile_ms(rest, 0.99)


async def drive(
    args: argparse.Namespace, gw: bench.Proc, gw_url: str, tenants: Tenants
) -> tuple[list[tuple[Phase, list[Sample]]], dict[str, float], dict[str, int]]:
    """Warm up, measure the gateway idle, then run the rounds; the flooder runs on its own."""
    url = gw_url + CHAT_PATH
    headers, body = chat_headers(tenants.victim_key), chat_body()
    timeout = aiohttp.ClientTimeout(total=bench.REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=64, limit_per_host=64)
    phases: list[tuple[Phase, list[Sample]]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        now = time.time()
        warm = await paced(
            session,
            url,
            headers,
            body,
            rate=args.fair_victim_rps,
            start=now,
            end=now + WARMUP_REQUESTS / args.fair_victim_rps,
            classify=classify_victim,
        )
        warm_bad = dict(Counter(s.outcome for s in warm if s.outcome != "ok"))
        first = float(args.first_start)
        # The gateway idle (the flooder's warm-up is over by now), for the per-request costs.
        await asyncio.sleep(max(0.0, min(SETTLE_S, first - time.time() - MIN_IDLE_S)))
        idle_t0, idle_c0, idle_l0 = time.time(), bench.cpu_ms(gw.pid), loop_thread_cpu_ms(gw.pid)
        await asyncio.sleep(max(0.0, first - time.time() - 0.05))
        idle_s = max(1e-3, time.time() - idle_t0)
        idle_rate = {
            "total": (bench.cpu_ms(gw.pid) - idle_c0) / idle_s,
            "loop": (loop_thread_cpu_ms(gw.pid) - idle_l0) / idle_s,
        }
        for start, end, rnd, kind in args.phase_plan:
            print(f"round {rnd} {kind}: {time.strftime('%H:%M:%S', time.localtime(start))}"
                  f" .. {time.strftime('%H:%M:%S', time.localtime(end))}", flush=True)  # fmt: skip
            phase = Phase(rnd, kind, start, end)
            await asyncio.sleep(max(0.0, start - time.time()))
            log_offset = gw.stderr_size()
            c0, r0, me0 = bench.cpu_ms(gw.pid), redis_cpu_ms(args.redis_url), bench.own_cpu_ms()
            pg0 = postgres_cpu_ms(args.database_url)
            h0, l0 = host_ticks(), loop_thread_cpu_ms(gw.pid)
            sampler = asyncio.get_running_loop().create_task(sample_cpu(gw.pid, phase))
            try:
                samples = await paced(
                    session,
                    url,
                    headers,
                    body,
                    rate=args.fair_victim_rps,
                    start=start,
                    end=end,
                    classify=classify_victim,
                )
            finally:
                sampler.cancel()
            # The phase's last requests are answered within milliseconds of its end.
            c1, r1, me1 = bench.cpu_ms(gw.pid), redis_cpu_ms(args.redis_url), bench.own_cpu_ms()
            pg1 = postgres_cpu_ms(args.database_url)
            phase.postgres_cpu_ms = postgres_delta_ms(pg0, pg1)
            h1, l1 = host_ticks(), loop_thread_cpu_ms(gw.pid)
            phase.gateway_loop_cpu_ms = l1 - l0
            if h0 and h1 and h1[1] > h0[1]:
                phase.host_busy_pct = 100 * (h1[0] - h0[0]) / (h1[1] - h0[1])
            phase.gateway_cpu_ms = c1 - c0
            phase.redis_cpu_ms = None if r0 is None or r1 is None else r1 - r0
            phase.client_cpu_ms = me1 - me0
            logged = gw.stderr_since(log_offset).splitlines()
            lines = [x for x in logged if " ERROR " in x or " CRITICAL " in x]
            phase.gateway_error_logs = len(lines)
            phase.gateway_error_examples = list(dict.fromkeys(x[:300] for x in lines))[:5]
            warned = [x for x in logged if " WARNING " in x]
            phase.gateway_warning_logs = len(warned)
            phase.gateway_warning_examples = list(dict.fromkeys(x[:300] for x in warned))[:5]
            victim_figures(phase, samples)
            phases.append((phase, samples))
            print(
                f"  victim {phase.victim_ok}/{phase.victim_sent} ok, p50 {bench.fmt(phase.p50_ms)}"
                f" ms, p99 {bench.fmt(phase.p99_ms)} ms; gateway CPU "
                f"{100 * phase.gateway_cpu_ms / 1000 / phase.seconds:.1f}% of a core",
                flush=True,
            )
            if not gw.alive():
                print(f"  the gateway exited ({gw.popen.poll()})", flush=True)
                break
    return phases, idle_rate, warm_bad


async def sample_cpu(pid: int, phase: Phase) -> None:
    """Every CPU_SAMPLE_S: (seconds into the phase, gateway CPU ms, its main thread's)."""
    while True:
        phase.cpu_series.append(
            (round(time.time() - phase.start, 3), bench.cpu_ms(pid), loop_thread_cpu_ms(pid))
        )
        await asyncio.sleep(CPU_SAMPLE_S)


def cpu_pct_between(phase: Phase, t0: float, t1: float, loop: bool = True) -> float | None:
    """The gateway's CPU (% of a core; its main thread's by default) from t0 to t1 s in."""
    series = phase.cpu_series
    a = min(series, key=lambda x: abs(x[0] - t0), default=None)
    b = min(series, key=lambda x: abs(x[0] - t1), default=None)
    if a is None or b is None or b[0] <= a[0]:
        return None
    i = 2 if loop else 1
    return 100 * (b[i] - a[i]) / 1000 / (b[0] - a[0])


def plan_phases(args: argparse.Namespace, earliest: float) -> None:
    """Rounds of (solo, [control,] flood), whole minutes each, from the minute after `earliest`."""
    d = args.fair_phase_s
    first = math.ceil(earliest / WINDOW_S) * WINDOW_S
    args.first_start = first
    args.phase_plan = []
    kinds = ["solo", "control", "flood"] if args.fair_control else ["solo", "flood"]
    for rnd in range(1, args.fair_rounds + 1):
        for i, kind in enumerate(kinds):
            start = first + ((rnd - 1) * len(kinds) + i) * d
            args.phase_plan.append((start, start + d, rnd, kind))


def wait_flooder(flooder: bench.Proc, deadline: float) -> dict[str, Any]:
    while flooder.alive() and time.time() < deadline:
        time.sleep(0.1)
    if flooder.alive():
        raise RuntimeError("the flooder did not finish in time")
    flooder.stop()
    out = flooder.out_path.read_text(errors="replace").strip().splitlines()
    if flooder.popen.returncode != 0 or not out:
        raise RuntimeError(
            f"the flooder exited with {flooder.popen.returncode}:\n{bench.tail(flooder.err_path)}"
        )
    return json.loads(out[-1])


# --------------------------------------------------------------------------- usage rows


def usage_figures(database_url: str, phases: list[Phase], tenants: Tenants) -> None:
    """The gateway's own view, from the usage rows: each request's latency_ms (from the start
    of its pipeline to its record), split by whether it started within NEAR_FLUSH_S after the
    usage writer began storing a batch (rows of one batch share their stored_at)."""
    import bisect

    import psycopg

    lo, hi = min(p.start for p in phases) - 5, max(p.end for p in phases) + 5
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        flushes = sorted(
            row[0].timestamp()
            for row in conn.execute(
                "SELECT DISTINCT stored_at FROM usage_usagelog"
                " WHERE stored_at BETWEEN to_timestamp(%s) AND to_timestamp(%s)",
                (lo, hi + 5),
            )
        )
        rows = conn.execute(
            "SELECT group_id, status, extract(epoch FROM created_at), latency_ms"
            " FROM usage_usagelog WHERE created_at BETWEEN to_timestamp(%s) AND to_timestamp(%s)"
            " AND group_id IN (%s, %s)",
            (lo, hi, tenants.victim_group, tenants.flooder_group),
        ).fetchall()

    def near_flush(start: float) -> bool:
        i = bisect.bisect_right(flushes, start) - 1
        return i >= 0 and start - flushes[i] < NEAR_FLUSH_S

    for p in phases:
        # In a flood phase only the rest counts for near/far: the burst is another story.
        calm = p.start + (p.burst_s or 0.0)
        victim: dict[str, list[float]] = {"all": [], "near": [], "far": []}
        refused: dict[str, list[float]] = {"near": [], "far": []}
        for group, status, created, latency in rows:
            start = float(created) - latency / 1000
            if not p.start <= start < p.end:
                continue
            where = "near" if near_flush(start) else "far"
            if group == tenants.victim_group and status == 200:
                victim["all"].append(latency)
                if start >= calm:
                    victim[where].append(latency)
            elif group == tenants.flooder_group and status == 429 and start >= calm:
                refused[where].append(latency)
        p.usage = {
            "flushes": sum(1 for t in flushes if p.start <= t < p.end),
            "victim_rows": len(victim["all"]),
            "victim_p50_ms": bench.percentile(victim["all"], 0.5),
            "victim_p99_ms": bench.percentile(victim["all"], 0.99),
            "victim_near_flush_n": len(victim["near"]),
            "victim_near_flush_p99_ms": bench.percentile(victim["near"], 0.99),
            "victim_far_p99_ms": bench.percentile(victim["far"], 0.99),
            "refused_near_flush_mean_ms": mean(refused["near"]),
            "refused_near_flush_p99_ms": bench.percentile(refused["near"], 0.99),
            "refused_far_mean_ms": mean(refused["far"]),
            "refused_far_p99_ms": bench.percentile(refused["far"], 0.99),
        }


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


# --------------------------------------------------------------------------- verdict, report


def analyse(
    args: argparse.Namespace, phases: list[Phase], idle_rate: dict[str, float]
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """Per-round figures, the pooled verdict, and what failed the checks."""
    problems: list[str] = []
    rounds: list[dict[str, Any]] = []
    limit = args.fair_flood_rpm
    for p in phases:
        if p.victim_failures:
            problems.append(f"round {p.round} {p.kind}: victim failures {p.victim_failures}")
        if p.victim_sent != round(p.seconds * args.fair_victim_rps):
            problems.append(f"round {p.round} {p.kind}: only {p.victim_sent} victim requests sent")
        if p.gateway_error_logs:
            problems.append(f"round {p.round} {p.kind}: {p.gateway_error_logs} gateway ERROR logs")
        if p.kind == "control" and (p.flood is None or p.flood["other"]):
            problems.append(f"round {p.round} control: /healthz failures {(p.flood or {})}")
        if p.kind == "flood":
            f = p.flood
            if f is None:
                problems.append(f"round {p.round}: no flooder figures")
                continue
            if f["other"]:
                problems.append(f"round {p.round}: flooder answers neither 200 nor LM-3001 "
                                f"refusals: {f['other']}")  # fmt: skip
            # Per window the limit admits exactly min(L, sent) (L = the group's rpm_limit); a
            # concurrency cap may refuse some of those too.
            expected = {w: min(limit, n) for w, n in f["sent_by_window"].items()}
            admitted = {w: f["admitted_by_window"].get(w, 0) for w in expected}
            if args.fair_flood_concurrency is None:
                if admitted != expected or f["capped"]:
                    problems.append(
                        f"round {p.round}: flooder admitted {admitted} by window "
                        f"({f['capped']} LM-3003), expected {expected}"
                    )
            elif any(admitted[w] > expected[w] for w in expected):
                problems.append(
                    f"round {p.round}: flooder admitted {admitted} by window, over {expected}"
                )
    by_round: dict[int, dict[str, Phase]] = {}
    for p in phases:
        by_round.setdefault(p.round, {})[p.kind] = p
    for rnd, pair in sorted(by_round.items()):
        solo, fl = pair.get("solo"), pair.get("flood")
        if solo is None or fl is None:
            continue
        rounds.append(round_figures(args, rnd, solo, fl, pair.get("control"), idle_rate))
    solo_all = [x for p in phases if p.kind == "solo" for x in p.latencies]
    flood_all = [x for p in phases if p.kind == "flood" for x in p.latencies]
    s99, f99 = quantile_ms(solo_all, 0.99), quantile_ms(flood_all, 0.99)
    ratio = f99 / s99 if s99 and f99 is not None else None
    pooled = {
        "solo_p50_ms": quantile_ms(solo_all, 0.5),
        "solo_p99_ms": s99,
        "flood_p50_ms": quantile_ms(flood_all, 0.5),
        "flood_p99_ms": f99,
        "p99_ratio": ratio,
        "max_ratio": args.fair_max_ratio,
        "verdict": None if ratio is None else ("PASS" if ratio <= args.fair_max_ratio else "FAIL"),
    }
    return rounds, pooled, problems


def round_figures(
    args: argparse.Namespace,
    rnd: int,
    solo: Phase,
    fl: Phase,
    control: Phase | None,
    idle_rate: dict[str, float],
) -> dict[str, Any]:
    f = fl.flood or {}
    admitted, refused = f.get("admitted", 0), f.get("refused", 0) + f.get("capped", 0)

    def costs(solo_ms: float, flood_ms: float, idle_ms_per_s: float, phase: Phase = fl):
        """(ms per served request in the solo phase, ms per refusal), idle excluded
        (with a control phase: ms per GET /healthz)."""
        if not solo.victim_sent:
            return None, None
        per_ok = (solo_ms - idle_ms_per_s * solo.seconds) / solo.victim_sent
        f = phase.flood or {}
        extra = refused if phase is fl else f.get("sent", 0)
        if not extra:
            return per_ok, None
        served = phase.victim_sent + (admitted if phase is fl else 0)
        return per_ok, (flood_ms - idle_ms_per_s * phase.seconds - served * per_ok) / extra

    per_ok, per_refused = costs(solo.gateway_cpu_ms, fl.gateway_cpu_ms, idle_rate["total"])
    loop_ok, loop_refused = costs(
        solo.gateway_loop_cpu_ms, fl.gateway_loop_cpu_ms, idle_rate["loop"]
    )
    ratio = fl.p99_ms / solo.p99_ms if solo.p99_ms and fl.p99_ms is not None else None
    ctl: dict[str, Any] = {}
    if control is not None:
        ctl = {
            "control_p50_ms": control.p50_ms,
            "control_p99_ms": control.p99_ms,
            "control_p99_ratio": (
                control.p99_ms / solo.p99_ms if solo.p99_ms and control.p99_ms is not None else None
            ),
            "control_sent": (control.flood or {}).get("sent"),
            "gateway_cpu_control_pct": 100 * control.gateway_cpu_ms / 1000 / control.seconds,
            "gateway_cpu_ms_per_healthz": costs(
                solo.gateway_cpu_ms, control.gateway_cpu_ms, idle_rate["total"], control
            )[1],
        }
    return {
        "round": rnd,
        "solo_p50_ms": solo.p50_ms,
        "solo_p99_ms": solo.p99_ms,
        "flood_p50_ms": fl.p50_ms,
        "flood_p99_ms": fl.p99_ms,
        "p99_ratio": ratio,
        "verdict": None if ratio is None else ("PASS" if ratio <= args.fair_max_ratio else "FAIL"),
        "burst_p99_ms": fl.burst_p99_ms,
        "rest_p99_ms": fl.rest_p99_ms,
        "rest_p99_ratio": (
            fl.rest_p99_ms / solo.p99_ms if solo.p99_ms and fl.rest_p99_ms is not None else None
        ),
        "flood_sent": f.get("sent"),
        "flood_admitted": admitted,
        "flood_refused": refused,
        "gateway_cpu_solo_pct": 100 * solo.gateway_cpu_ms / 1000 / solo.seconds,
        "gateway_cpu_flood_pct": 100 * fl.gateway_cpu_ms / 1000 / fl.seconds,
        "gateway_idle_ms_per_s": idle_rate["total"],
        "gateway_cpu_ms_per_served_req": per_ok,
        "gateway_cpu_ms_per_refused_req": per_refused,
        "gateway_loop_cpu_ms_per_served_req": loop_ok,
        "gateway_loop_cpu_ms_per_refused_req": loop_refused,
        "gateway_threads_cpu_ms_per_refused_req": (
            None if per_refused is None or loop_refused is None else per_refused - loop_refused
        ),
        **ctl,
    }


def pct(cpu_ms: float | None, seconds: float) -> str:
    return "-" if cpu_ms is None else f"{100 * cpu_ms / 1000 / seconds:.1f}"


def report(args: argparse.Namespace, phases: list[Phase], rounds, pooled) -> str:
    flood_rate = args.fair_flood_rpm * args.fair_flood_factor / 60
    head = (
        f"victim: {args.fair_victim_rps:g} req/s open loop (rpm_limit {args.fair_victim_rpm}); "
        f"flooder: rpm_limit L={args.fair_flood_rpm}, sending {args.fair_flood_factor:g} x L "
        f"= {flood_rate:g} req/s open loop"
        + (
            f", concurrency_limit {args.fair_flood_concurrency}"
            if args.fair_flood_concurrency
            else ""
        )
        + f"; phases of {args.fair_phase_s} s"
    )
    rows, frows = [], []
    for p in phases:
        rows.append(
            [
                f"{p.round} {p.kind}",
                f"{p.victim_ok}/{p.victim_sent}",
                bench.fmt(p.p50_ms),
                bench.fmt(p.p99_ms),
                bench.fmt(p.max_ms),
                bench.fmt(p.lag_p99_ms),
                bench.fmt(p.burst_s, 1),
                bench.fmt(p.burst_p99_ms),
                bench.fmt(p.burst_loop_cpu_pct, 0),
                bench.fmt(p.rest_p99_ms),
                bench.fmt(p.rest_loop_cpu_pct, 0),
                pct(p.gateway_cpu_ms, p.seconds),
                pct(p.gateway_loop_cpu_ms, p.seconds),
                pct(p.redis_cpu_ms, p.seconds),
                pct(p.postgres_cpu_ms, p.seconds),
                bench.fmt(p.host_busy_pct, 0),
            ]
        )
        f = p.flood
        if f is not None:
            first = f.get("first_refusal")
            frows.append(
                [
                    f"{p.round} {p.kind}",
                    str(f["sent"]),
                    str(f["admitted"]),
                    str(f["refused"]),
                    str(f["capped"]),
                    str(sum(f["other"].values())),
                    "-" if first is None else f"{first - p.start:.2f}",
                    bench.fmt(f["admitted_p50_ms"]),
                    bench.fmt(f["admitted_p99_ms"]),
                    bench.fmt(f["refused_p50_ms"]),
                    bench.fmt(f["refused_p99_ms"]),
                    bench.fmt(f["lag_p99_ms"]),
                    pct(f["client_cpu_ms"], p.seconds),
                ]
            )
    table = bench.render_table(
        rows,
        [
            "victim", "ok", "p50 ms", "p99 ms", "max ms", "lag99 ms", "burst s", "burst p99",
            "b loop %", "rest p99", "r loop %", "gw cpu %", "gw loop %", "redis %", "pg %",
            "host %",
        ],
    )  # fmt: skip
    ftable = bench.render_table(
        frows,
        [
            "flooder", "sent", "200", "3001", "3003", "other", "1st 429 s", "200 p50", "200 p99",
            "429 p50", "429 p99", "lag99 ms", "client %",
        ],
    )  # fmt: skip
    urows = [
        [
            f"{p.round} {p.kind}",
            str(u["victim_rows"]),
            bench.fmt(u["victim_p50_ms"], 0),
            bench.fmt(u["victim_p99_ms"], 0),
            str(u["flushes"]),
            str(u["victim_near_flush_n"]),
            bench.fmt(u["victim_near_flush_p99_ms"], 0),
            bench.fmt(u["victim_far_p99_ms"], 0),
            bench.fmt(u["refused_near_flush_mean_ms"]),
            bench.fmt(u["refused_near_flush_p99_ms"], 0),
            bench.fmt(u["refused_far_mean_ms"]),
            bench.fmt(u["refused_far_p99_ms"], 0),
        ]
        for p in phases
        if (u := p.usage) is not None
    ]
    utable = (
        bench.render_table(
            urows,
            [
                "gateway side",
                "rows",
                "p50 ms",
                "p99 ms",
                "flushes",
                "near n",
                "near p99",
                "far p99",
                "429 near avg",
                "429 near p99",
                "429 far avg",
                "429 far p99",
            ],
        )  # fmt: skip
        if urows
        else "(no usage rows read: an external PostgreSQL database is needed)"
    )
    rrows = [
        [
            str(r["round"]),
            bench.fmt(r["solo_p50_ms"]),
            bench.fmt(r["solo_p99_ms"]),
            bench.fmt(r["flood_p50_ms"]),
            bench.fmt(r["flood_p99_ms"]),
            bench.fmt(r["p99_ratio"], 3),
            r["verdict"] or "-",
            bench.fmt(r["burst_p99_ms"]),
            bench.fmt(r["rest_p99_ms"]),
            bench.fmt(r["rest_p99_ratio"], 3),
            bench.fmt(r["gateway_cpu_ms_per_served_req"], 3),
            bench.fmt(r["gateway_cpu_ms_per_refused_req"], 3),
            bench.fmt(r["gateway_loop_cpu_ms_per_refused_req"], 3),
            bench.fmt(r["gateway_threads_cpu_ms_per_refused_req"], 3),
            bench.fmt(r.get("control_p99_ms")),
            bench.fmt(r.get("control_p99_ratio"), 3),
            bench.fmt(r.get("gateway_cpu_ms_per_healthz"), 3),
        ]
        for r in rounds
    ]
    rtable = bench.render_table(
        rrows,
        [
            "round", "solo p50", "solo p99", "flood p50", "flood p99", "p99 ratio", "verdict",
            "burst p99", "rest p99", "rest ratio",
            "gw ms/served", "gw ms/refused", "loop", "threads", "ctl p99", "ctl ratio",
            "gw ms/healthz",
        ],
    )  # fmt: skip
    verdict = (
        f"victim p99 under flood / solo p99 = {bench.fmt(pooled['p99_ratio'], 3)} "
        f"({bench.fmt(pooled['flood_p99_ms'])} / {bench.fmt(pooled['solo_p99_ms'])} ms, all "
        f"rounds pooled), bound {args.fair_max_ratio:.2f}: {pooled['verdict'] or '-'}"
    )
    notes = (
        "burst s / burst p99 / b loop %: how long the flooder's admitted requests took at the "
        "window's start (until the last was answered), the victim's p99 and the gateway's main "
        "thread CPU meanwhile; rest p99 / r loop %: the same afterwards, the flooder only "
        "refused.  The flooder table: its answers (200 admitted, 429 LM-3001 refused), when it "
        "was first refused, latencies, send lag, its client's CPU.\n"
        "gateway side: the usage rows' latency_ms (the gateway's own clock, pipeline start to "
        "record, integer ms) of the victim's requests and the flooder's refusals, split by "
        f"whether they started within {NEAR_FLUSH_S * 1000:.0f} ms after the usage writer began "
        "storing a batch (near) or not (far); in a flood phase near/far count only after its "
        "burst.\n"
        "rest ratio: the victim's p99 once the flooder is only refused / solo p99.\n"
        "control (--fair-control): the flooder's rate as GET /healthz (no auth, limits or "
        "usage row): ctl p99 and ratio are the victim's then, gw ms/healthz the CPU per GET.\n"
        "gw ms/served: gateway CPU per victim request in the solo phase, idle excluded; "
        "gw ms/refused: the flood phase's extra CPU, less the admitted flooder requests at "
        "that cost, per refusal (loop: its main thread, the event loop; threads: the others, "
        "where the database work runs).\ngw loop %: the gateway's main thread alone; "
        "redis %: the whole Redis server (shared); pg %: this database's PostgreSQL backends; "
        "host %: all cores busy, everyone's "
        "processes (the host is shared: a busy host makes p99 noisy)."
    )
    return "\n\n".join([head, table, ftable, utable, rtable, verdict, notes])


# --------------------------------------------------------------------------- main


def main(args: argparse.Namespace) -> int:
    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-fair-"))
    procs: list[bench.Proc] = []
    status = 0
    try:
        try:
            if args.redis_url:
                print(f"cleared {clear_redis(args.redis_url)} tollgate:* keys in Redis", flush=True)
            env = bench.child_env(str(tmp / "var"), args.database_url, args.redis_url)
            stub, stub_url = bench.start_stub(env, tmp)
            procs.append(stub)
            bench.run_manage(["migrate", "--noinput"], env)
            bench.run_manage(["seed_demo", "--stub-url", stub_url], env)  # the stub's profiles
            tenants = create_tenants(args, env)
            gw, gw_url = bench.start_gateway(env, tmp)
            procs.append(gw)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
            return bench.setup_failed(exc, procs)
        print(
            f"stub {stub_url} (pid {stub.pid}), gateway {gw_url} (pid {gw.pid}), "
            f"{'external database' if args.database_url else 'embedded SQLite'}"
            f"{', Redis' if args.redis_url else ', no Redis'}; {os.cpu_count()} CPUs; "
            f"victim group {tenants.victim_group}, flooder group {tenants.flooder_group}",
            flush=True,
        )
        plan_phases(args, time.time() + WARMUP_REQUESTS / args.fair_victim_rps + 8.0)
        flood_plan = {
            "base": gw_url,
            "key": tenants.flooder_key,
            "rate": args.fair_flood_rpm * args.fair_flood_factor / 60,
            "phases": [(s, e, kind) for s, e, _, kind in args.phase_plan if kind != "solo"],
        }
        argv = [sys.executable, str(Path(__file__).resolve()), "--flood-child"]
        flooder = bench.Proc("flooder", [*argv, json.dumps(flood_plan)], dict(os.environ), tmp)
        procs.append(flooder)
        print(
            f"first round at {time.strftime('%H:%M:%S', time.localtime(args.first_start))}; "
            f"{args.fair_rounds} round(s) of {len(args.phase_plan) // args.fair_rounds} x "
            f"{args.fair_phase_s} s",
            flush=True,
        )
        measured, idle_rate, warm_bad = bench.run_loop(lambda: drive(args, gw, gw_url, tenants))
        tallies = wait_flooder(flooder, time.time() + 60)
        flood_phases = iter(tallies["phases"])
        for p, samples in measured:
            if p.kind != "solo":
                p.flood = next(flood_phases, None)
            if p.kind == "flood":
                split_burst(p, samples)
        phases = [p for p, _ in measured]
        if args.database_url and phases:
            time.sleep(2.0)  # the usage writer stores the last rows (every 0.5 s by default)
            try:
                usage_figures(args.database_url, phases, tenants)
            except Exception as exc:  # a diagnostic only: never lose the run's figures to it
                print(f"no figures from the usage rows: {exc!r}", file=sys.stderr)
        rounds, pooled, problems = analyse(args, phases, idle_rate)
        if warm_bad or tallies["warmup_failures"]:
            problems.append(f"warm-up failures: {warm_bad} {tallies['warmup_failures']}")
        if len(phases) < len(args.phase_plan):
            problems.append("not every phase ran (a server process died?)")
        print()
        print(report(args, phases, rounds, pooled))
        for p in phases:
            if p.gateway_warning_logs:
                print(f"\nround {p.round} {p.kind}: {p.gateway_warning_logs} gateway WARNING logs")
                for line in p.gateway_warning_examples:
                    print(f"  gateway log: {line}")
        if problems:
            print("\nCHECKS FAILED:\n  " + "\n  ".join(problems))
            for p in phases:
                for line in p.gateway_error_examples:
                    print(f"  gateway log: {line}")
            status = 1
        elif pooled["verdict"] != "PASS":
            status = 1
        if args.json:
            doc = {
                "scenario": "fairness",
                "args": {
                    k: getattr(args, k)
                    for k in vars(args)
                    if k.startswith("fair_") or k in ("database_url", "redis_url")
                },
                "host": {"cpus": os.cpu_count()},
                "gateway_idle_cpu_ms_per_s": idle_rate,
                "phases": [
                    {k: v for k, v in asdict(p).items() if k != "latencies"} for p in phases
                ],
                "rounds": rounds,
                "pooled": pooled,
                "problems": problems,
                "ok": not problems,
            }
            doc["args"]["database_url"] = bool(args.database_url)
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
            print(f"\nwrote {args.json}")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    except RuntimeError as exc:
        print(f"failed: {exc}", file=sys.stderr)
        status = 1
    finally:
        bench.stop_all(procs, tmp, keep=args.keep)
    return status


if __name__ == "__main__":
    if sys.argv[1:2] == ["--flood-child"]:
        sys.exit(flood_child_main(sys.argv[2:]))
    sys.exit("run this through run.py: python bench/run.py --fairness ...")
