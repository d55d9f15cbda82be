"""The paced-streams scenario of bench/run.py: N streams held open at once by the stub.

``python bench/run.py --paced-streams 100,300,1000 --only paced`` runs, for each count N and
each shape (``--paced-shapes``, default ``openai,anthropic``), N concurrent streamed requests
straight to the stub (``stub-<shape>-paced``), then the same N through the bare proxy
(``bare-<shape>-paced``, bench/bare.py: the floor) and through the gateway
(``gw-<shape>-paced``), all N sent at once. The stub paces every one of them alike: before
each run the bench queues its ``slow`` fault (``delay_ms`` = ``--pace-ms``, default 500,
before each of the 8 answer tokens; ``times`` = N, matched on the key the stub sees from
that client, learned from the warm-up) through ``POST /_stub/faults``: the gateway does not
forward client headers, so pacing cannot ride on the request. A run checks afterwards, in
``GET /_stub/calls``, that the stub paced exactly N calls.

``--paced-ramp-ms R`` sends the N requests evenly over R ms instead of all at once (with R
under a stream's length every stream is still open at once, but the gateway opens them at
N/R per ms rather than in one burst: what holding N streams costs, apart from the burst).

Each run first sends ``min(N, 20)`` unpaced warm-up streams (not measured), waits for the
serving process to go quiet, then measures:

* ``ttfb``: from sending a request to the first body bytes (p50 / p99 / max).
* ``ttft``: from sending a request to the first answer token (the bytes ``Hello``). The stub
  sends its first bytes (a role chunk / ``message_start``) at once and the first token one
  pace later; the gateway sends nothing before the first token has come (until then it can
  still retry or fall back), so its ttfb is its ttft and the like-for-like measure of what it
  adds is ``gw ttft - stub ttft`` (``+ttft``); ``+ttfb`` is gw ttfb - stub ttfb as measured.
* ``total s``: the run's wall time, first request sent to last stream ended.
* ``open``: streams that had their first bytes and had not ended, at the moment ``RSS/str``
  was taken (N when every stream was open at once).
* ``RSS/str KB``: the serving process's VmRSS (``/proc/<pid>/status``) at that moment minus
  its VmRSS just before the run, divided by ``open``. The stub's for ``stub-*`` runs, the
  gateway's for ``gw-*`` runs. Marked ``*`` when that process had already held as many
  streams in an earlier run: it then reuses the memory they freed and the figure reads low
  (after fewer streams, somewhat low); give one count and one shape to measure it.
* ``cpu% open``: the serving process's CPU (user+system, as one core's %) from the first
  request sent until every stream had its first bytes: near 100 there means the single
  event loop was busy the whole time, i.e. opening N streams is CPU-bound, not queued (it
  counts 10 ms clock ticks: rough when the streams open in under ~100 ms);
  ``cpu% all`` / ``cpu s``: over the whole run. ``client cpu%``: this process's.
* ``fail``: requests that failed (status, body check, timeout, connection) plus calls the
  stub did not pace; ``ERR``/``WARN``: ERROR/CRITICAL and WARNING lines the gateway logged.

A run fails (exit code 1) on any failed request, unpaced call or gateway ERROR line.
This process raises its RLIMIT_NOFILE soft limit to the hard one before starting the servers
(children inherit it), and holds all N streams on one connection each (no pool limit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

import aiohttp
import orjson

CHUNKS = 8  # the stub's default answer: 8 tokens, each one pace after the last
WARMUP_MAX = 20
FIRST_TOKEN = b"Hello"  # the stub's first answer token, in both shapes (never in a prompt)
SAMPLE_S = 0.02
QUIET_CPU_PCT = 5.0
QUIET_MAX_S = 15.0


def raise_nofile() -> tuple[int, int]:
    """Raise this process's open-files soft limit to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class PacedResult:
    name: str
    target: str
    shape: str
    n: int
    pace_ms: float
    ramp_ms: float = 0.0
    ok: int = 0
    failed: int = 0
    paced_calls: int = 0
    elapsed_s: float = 0.0
    opened_s: float | None = None  # until every stream had its first bytes
    ttfb_p50_ms: float | None = None
    ttfb_p99_ms: float | None = None
    ttfb_max_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    ttft_max_ms: float | None = None
    open_at_sample: int = 0
    rss_before_kb: int | None = None
    rss_open_kb: int | None = None
    rss_peak_kb: int | None = None
    rss_per_stream_kb: float | None = None
    rss_reused: bool = False  # the process had held as many streams before: reads low
    cpu_open_pct: float | None = None
    cpu_all_pct: float | None = None
    cpu_ms: float | None = None
    gateway_cpu_ms: float | None = None
    stub_cpu_ms: float | None = None
    client_cpu_pct: float | None = None
    gateway_error_logs: int = 0
    gateway_warning_logs: int = 0
    gateway_log_examples: list[str] = field(default_factory=list)
    failure_kinds: dict[str, int] = field(default_factory=dict)
    failure_examples: list[str] = field(default_factory=list)

    @property
    def bad(self) -> bool:
        return bool(self.failed or self.gateway_error_logs)

    @property
    def flag(self) -> str:
        if self.failed:
            return " [FAILED]"
        return " [GW ERRORS]" if self.gateway_error_logs else ""


@dataclass
class Sampled:
    """What the sampler saw: the most streams open at once and the RSS then, the peak RSS,
    and (serving CPU ms, clock) at the moment every stream had its first bytes."""

    open: int = 0
    rss_kb: int | None = None
    peak_kb: int = 0
    cpu_open: tuple[float, float] | None = None


class Streams:
    """What the N streams of one run did, and how many are open right now."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = 0
        self.first_bytes = 0
        self.open = 0
        self.ended = 0
        self.ttfbs: list[float] = []
        self.ttfts: list[float] = []
        self.ok = 0
        self.failed = 0
        self.kinds: Counter[str] = Counter()
        self.examples: list[str] = []
        self.all_open = asyncio.Event()
        self.all_first = asyncio.Event()

    def fail(self, kind: str, detail: str) -> None:
        self.failed += 1
        self.kinds[kind] += 1
        if len(self.examples) < 5:
            self.examples.append(f"{kind}: {detail}"[:600])


async def one_stream(
    session: aiohttp.ClientSession, prep: Any, streams: Streams, delay_s: float = 0.0
) -> None:
    if delay_s:
        await asyncio.sleep(delay_s)
    t0 = time.perf_counter()
    got_first = False
    ttft: float | None = None
    chunks: list[bytes] = []
    status = 0
    try:
        async with session.post(prep.url, data=prep.body, headers=prep.headers) as resp:
            status = resp.status
            async for chunk in resp.content.iter_any():
                if not got_first:
                    got_first = True
                    streams.ttfbs.append(time.perf_counter() - t0)
                    streams.first_bytes += 1
                    streams.open += 1
                    if streams.open == streams.n:
                        streams.all_open.set()
                    if streams.first_bytes == streams.n:
                        streams.all_first.set()
                chunks.append(chunk)
                if ttft is None and FIRST_TOKEN in b"".join(chunks[-2:]):
                    ttft = time.perf_counter() - t0
    except TimeoutError:
        streams.fail("timeout", "no complete answer in time")
        return
    except aiohttp.ClientError as exc:
        streams.fail(type(exc).__name__, repr(exc))
        return
    finally:
        if got_first:
            streams.open -= 1
        streams.ended += 1
        if streams.ended == streams.n:  # wake the sampler even when some never opened
            streams.all_first.set()
            streams.all_open.set()
    body = b"".join(chunks)
    if status != 200:
        streams.fail(f"HTTP {status}", body[:400].decode("utf-8", "replace"))
        return
    wrong = prep.check(body)
    if wrong is not None:
        streams.fail(wrong, body[-400:].decode("utf-8", "replace"))
        return
    if ttft is None:
        streams.fail("no-first-token", body[:400].decode("utf-8", "replace"))
        return
    streams.ok += 1
    streams.ttfts.append(ttft)


async def stub_json(session: aiohttp.ClientSession, method: str, url: str, body: Any = None):
    async with session.request(method, url, json=body) as resp:
        data = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{method} {url} answered {resp.status}: {data[:300]!r}")
        return orjson.loads(data)


async def wait_quiet(pid: int, bench: ModuleType) -> None:
    """Wait (bounded) until pid spends under QUIET_CPU_PCT of a core (e.g. writing usage)."""
    deadline = time.monotonic() + QUIET_MAX_S
    while time.monotonic() < deadline:
        c0, t0 = bench.cpu_ms(pid), time.monotonic()
        await asyncio.sleep(0.5)
        if (bench.cpu_ms(pid) - c0) / ((time.monotonic() - t0) * 10) < QUIET_CPU_PCT:
            return


async def run_one(
    bench: ModuleType,
    servers: Any,
    shape: str,
    target: str,
    n: int,
    pace_ms: float,
    ramp_ms: float = 0.0,
) -> PacedResult:
    name = f"{target}-{shape}-paced"
    result = PacedResult(name, target, shape, n, pace_ms, ramp_ms)
    sc = bench.Scenario(name, target, shape, True)
    prep = bench.prepare(sc, servers, bench.DEFAULT_WORDS)
    serving = servers.stub if target == "stub" else servers.gateway
    stub_url = servers.stub_url
    timeout = aiohttp.ClientTimeout(total=bench.REQUEST_TIMEOUT_S + CHUNKS * pace_ms / 1000)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await stub_json(session, "DELETE", stub_url + "/_stub/calls")
        warm = Streams(min(n, WARMUP_MAX))
        await asyncio.gather(*(one_stream(session, prep, warm) for _ in range(warm.n)))
        if warm.failed:
            result.failure_kinds.update({f"warm-up {k}": v for k, v in warm.kinds.items()})
            result.failure_examples.extend(f"warm-up {e}" for e in warm.examples)
            result.failed = warm.failed
            return result
        calls = (await stub_json(session, "GET", stub_url + "/_stub/calls"))["calls"]
        keys = {c["key"] for c in calls if c["stream"]}
        if len(keys) != 1:
            raise RuntimeError(f"{name}: warm-up reached the stub with keys {sorted(keys)}")
        await stub_json(session, "DELETE", stub_url + "/_stub/calls")
        await stub_json(
            session,
            "POST",
            stub_url + "/_stub/faults",
            {
                "faults": [
                    {"kind": "slow", "delay_ms": pace_ms, "times": n, "match": {"key": keys.pop()}}
                ]
            },
        )
        await wait_quiet(serving.pid, bench)

        streams = Streams(n)
        log_offset = servers.gateway.stderr_size()
        result.rss_before_kb = rss_kb(serving.pid)
        cpu0 = bench.cpu_ms(serving.pid)
        gw0, stub0, me0 = (
            bench.cpu_ms(servers.gateway.pid),
            bench.cpu_ms(servers.stub.pid),
            bench.own_cpu_ms(),
        )
        t0 = time.perf_counter()
        best = Sampled(peak_kb=result.rss_before_kb or 0)

        async def sampler() -> None:
            while streams.ended < n:
                rss = rss_kb(serving.pid)
                if rss is not None:
                    best.peak_kb = max(best.peak_kb, rss)
                    more = streams.open > best.open
                    if more or (streams.open == best.open and rss > (best.rss_kb or 0)):
                        best.open, best.rss_kb = streams.open, rss
                if not streams.all_first.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(SAMPLE_S):
                            await streams.all_first.wait()
                    continue
                if best.cpu_open is None:
                    best.cpu_open = (bench.cpu_ms(serving.pid), time.perf_counter())
                    continue  # take the RSS of the moment every stream is open, right away
                await asyncio.sleep(SAMPLE_S)

        sampling = asyncio.create_task(sampler())
        step_s = ramp_ms / 1000 / n
        await asyncio.gather(*(one_stream(session, prep, streams, i * step_s) for i in range(n)))
        result.elapsed_s = time.perf_counter() - t0
        cpu1 = bench.cpu_ms(serving.pid)
        gw1, stub1, me1 = (
            bench.cpu_ms(servers.gateway.pid),
            bench.cpu_ms(servers.stub.pid),
            bench.own_cpu_ms(),
        )
        await sampling
        calls = (await stub_json(session, "GET", stub_url + "/_stub/calls"))["calls"]
        await stub_json(session, "DELETE", stub_url + "/_stub/calls")
    await asyncio.sleep(0.2)
    result.paced_calls = sum(1 for c in calls if c["fault"] == "slow")
    lines = servers.gateway.stderr_since(log_offset).splitlines()
    errors = [ln for ln in lines if " ERROR " in ln or " CRITICAL " in ln]
    warnings = [ln for ln in lines if " WARNING " in ln]
    result.gateway_error_logs, result.gateway_warning_logs = len(errors), len(warnings)
    result.gateway_log_examples = list(
        dict.fromkeys(ln.split(" ", 3)[-1][:300] for ln in errors + warnings)
    )[:5]
    result.ok = streams.ok
    result.failed = streams.failed
    result.failure_kinds.update(streams.kinds)
    result.failure_examples.extend(streams.examples)
    if result.paced_calls != n:
        result.failed += abs(n - result.paced_calls)
        result.failure_kinds["not paced by the stub"] = abs(n - result.paced_calls)
    ms = bench.ms
    pct = bench.percentile
    result.ttfb_p50_ms, result.ttfb_p99_ms = (
        ms(pct(streams.ttfbs, 0.5)),
        ms(pct(streams.ttfbs, 0.99)),
    )
    result.ttfb_max_ms = ms(max(streams.ttfbs, default=None))
    result.ttft_p50_ms, result.ttft_p99_ms = (
        ms(pct(streams.ttfts, 0.5)),
        ms(pct(streams.ttfts, 0.99)),
    )
    result.ttft_max_ms = ms(max(streams.ttfts, default=None))
    result.open_at_sample = best.open
    result.rss_open_kb = best.rss_kb
    result.rss_peak_kb = best.peak_kb
    if best.rss_kb is not None and result.rss_before_kb is not None and best.open:
        result.rss_per_stream_kb = (best.rss_kb - result.rss_before_kb) / best.open
    wall_ms = result.elapsed_s * 1000
    result.cpu_ms = cpu1 - cpu0
    result.cpu_all_pct = 100 * result.cpu_ms / wall_ms if wall_ms else None
    if best.cpu_open is not None:
        cpu_at, t_at = best.cpu_open
        result.opened_s = t_at - t0
        if result.opened_s > 0:
            result.cpu_open_pct = 100 * (cpu_at - cpu0) / (result.opened_s * 1000)
    result.gateway_cpu_ms, result.stub_cpu_ms = gw1 - gw0, stub1 - stub0
    result.client_cpu_pct = 100 * (me1 - me0) / wall_ms if wall_ms else None
    return result


async def run_paced(
    args: argparse.Namespace,
    servers: Any,
    bench: ModuleType,
    floor: Any = None,
    held: Counter[str] | None = None,
) -> list[PacedResult]:
    """Every count of --paced-streams, every shape: the stub directly, then the bare proxy
    (`floor`, bench/bare.py, when given), then the gateway. `held`, the most streams each
    process has held so far, is one count for a run's rounds (they share the processes):
    memory freed in an earlier round reads low in a later one."""
    results = []
    held = Counter() if held is None else held
    targets = ("stub", "bare", "gw") if floor is not None else ("stub", "gw")
    for n in args.paced_streams:
        for shape in args.paced_shapes:
            for target in targets:
                print(f"running {target}-{shape}-paced, {n} streams ...", flush=True)
                through = floor if target == "bare" else servers
                r = await run_one(
                    bench, through, shape, target, n, args.pace_ms, args.paced_ramp_ms
                )
                r.rss_reused = held[target] >= r.open_at_sample > 0
                held[target] = max(held[target], r.open_at_sample)
                results.append(r)
                print(
                    f"  {r.ok}/{n} ok, ttfb p50 {bench.fmt(r.ttfb_p50_ms, 1)} ms"
                    f" p99 {bench.fmt(r.ttfb_p99_ms, 1)} ms,"
                    f" ttft p50 {bench.fmt(r.ttft_p50_ms, 1)} ms,"
                    f" RSS/stream {bench.fmt(r.rss_per_stream_kb, 1)} KB{r.flag}",
                    flush=True,
                )
                if not (servers.gateway.alive() and servers.stub.alive()):
                    print("  a server process died: skipping the remaining paced runs", flush=True)
                    return results
    return results


def report(results: list[PacedResult], bench: ModuleType) -> str:
    fmt = bench.fmt
    headers = [
        "paced scenario", "n", "ok", "fail", "ttfb p50", "p99", "max", "ttft p50", "p99",
        "max", "total s", "open", "RSS/str KB", "cpu% open", "cpu% all", "cpu s",
        "client cpu%", "ERR", "WARN",
    ]  # fmt: skip
    rows = [
        [
            r.name + r.flag,
            str(r.n),
            str(r.ok),
            str(r.failed),
            fmt(r.ttfb_p50_ms, 1),
            fmt(r.ttfb_p99_ms, 1),
            fmt(r.ttfb_max_ms, 1),
            fmt(r.ttft_p50_ms, 1),
            fmt(r.ttft_p99_ms, 1),
            fmt(r.ttft_max_ms, 1),
            fmt(r.elapsed_s, 2),
            str(r.open_at_sample),
            fmt(r.rss_per_stream_kb, 1) + ("*" if r.rss_reused else ""),
            fmt(r.cpu_open_pct, 0),
            fmt(r.cpu_all_pct, 0),
            fmt((r.cpu_ms or 0) / 1000, 2),
            fmt(r.client_cpu_pct, 0),
            str(r.gateway_error_logs) if r.target == "gw" else "-",
            str(r.gateway_warning_logs) if r.target == "gw" else "-",
        ]  # fmt: skip
        for r in results
    ]
    first = results[0]
    sent = f"over {first.ramp_ms:.0f} ms" if first.ramp_ms else "all at once"
    title = f"paced streams: {CHUNKS} tokens {first.pace_ms:.0f} ms apart, requests sent {sent}"
    parts = [title + "\n" + render(bench, rows, headers)]
    by_key = {(r.target, r.shape, r.n): r for r in results}
    comp = []
    for r in results:
        base = by_key.get(("stub", r.shape, r.n))
        if r.target != "gw" or base is None:
            continue

        def diff(a: float | None, b: float | None) -> str:
            return "-" if a is None or b is None else f"{a - b:.1f}"

        comp.append(
            [
                f"{r.name} n={r.n}",
                diff(r.ttft_p50_ms, base.ttft_p50_ms),
                diff(r.ttft_p99_ms, base.ttft_p99_ms),
                diff(r.ttfb_p50_ms, base.ttfb_p50_ms),
                diff(r.ttfb_p99_ms, base.ttfb_p99_ms),
                fmt(r.rss_per_stream_kb, 1) + ("*" if r.rss_reused else ""),
            ]
        )
    if comp:
        parts.append(
            render(
                bench,
                comp,
                [
                    "gateway vs stub (paced)",
                    "+ttft p50",
                    "+ttft p99",
                    "+ttfb p50",
                    "+ttfb p99",
                    "gw RSS/str KB",
                ],
            )
        )
    if any(r.rss_reused for r in results):
        parts.append(
            "* the process had held as many streams before: it reuses the memory they freed, "
            "so this RSS/str reads low (one count and one shape per run measures it)."
        )
    parts.append(
        "Paced goal (reference): gateway TTFB within 50 ms of the stub's, flat in N; <= 50 KB RSS "
        "per open stream; no errors. ms unless noted; the gateway sends nothing before the first "
        "token, so +ttft is its like-for-like added latency."
    )
    return "\n\n".join(parts)


def render(bench: ModuleType, rows: list[list[str]], headers: list[str]) -> str:
    return bench.render_table(rows, headers)


def print_failures(results: list[PacedResult]) -> None:
    for r in results:
        if not (r.bad or r.gateway_log_examples):
            continue
        print(
            f"\n{r.name} n={r.n}: {r.failed} failed, {r.gateway_error_logs} gateway ERROR and "
            f"{r.gateway_warning_logs} WARNING log lines"
        )
        for kind, count in sorted(r.failure_kinds.items(), key=lambda kv: -kv[1]):
            print(f"  {count:6d} x {kind}")
        for example in r.failure_examples:
            print(f"  e.g. {example}")
        for example in r.gateway_log_examples:
            print(f"  gateway log: {example}")


def parse_counts(text: str) -> list[int]:
    """N[,N...]; 0 (or nothing) runs no paced streams (`make bench PACED_STREAMS=0`)."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("stream counts: comma-separated integers") from None
    if any(c < 0 for c in counts):
        raise argparse.ArgumentTypeError("stream counts must not be negative")
    return [c for c in counts if c]


def parse_shapes(text: str) -> list[str]:
    shapes = [x.strip() for x in text.split(",") if x.strip()]
    if not shapes or any(s not in ("openai", "anthropic") for s in shapes):
        raise argparse.ArgumentTypeError("shapes: a comma-separated subset of openai,anthropic")
    return shapes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--paced-streams", type=parse_counts, default=[], metavar="N[,N...]",
        help="also run the paced-streams scenario with N concurrent streams (each count in turn;"
        " `--only paced` runs nothing else)",
    )  # fmt: skip
    p.add_argument(
        "--pace-ms", type=float, default=500.0,
        help="paced streams: the stub's delay before each of the 8 tokens (default 500)",
    )  # fmt: skip
    p.add_argument(
        "--paced-ramp-ms", type=float, default=0.0,
        help="paced streams: send the N requests evenly over this many ms (default 0: at once)",
    )  # fmt: skip
    p.add_argument(
        "--paced-shapes", type=parse_shapes, default=["openai", "anthropic"],
        help="paced streams: client shapes (default openai,anthropic)",
    )  # fmt: skip


def as_json(results: list[PacedResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]


def nofile_needed(args: argparse.Namespace) -> int:
    return 4 * max(args.paced_streams, default=0) + 1024


def check_nofile(args: argparse.Namespace) -> str | None:
    soft, _ = raise_nofile()
    need = nofile_needed(args)
    if soft != resource.RLIM_INFINITY and soft < need:
        return f"RLIMIT_NOFILE is {soft}; {need} open files are needed for these paced streams"
    return None
