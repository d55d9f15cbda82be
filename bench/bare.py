"""The floor: a bare proxy on the gateway's own server stack, with nothing in between.

``bench/run.py`` starts it beside the gateway (``python -m uvicorn bench.bare:app``, the
gateway's flags: one worker, uvloop, httptools, no access log) and runs every ``gw-X`` load
it can against it as ``bare-X``, right before ``gw-X``. The gateway's targets (issue 44) are
ratios to it, taken in the same run: what Python, uvicorn and aiohttp cost per request is
then the same on both sides, and only what Tollgate does in between differs.

Per request it does what any proxy must and nothing more: read the body, send it to the same
path on the stub with the client's own headers (aiohttp, one session with no connection limit,
as the gateway's), and send the answer back as it comes, chunk by chunk. No authentication,
no parsing, no accounting, no logging. Its ``/healthz`` answers 200.

With ``BENCH_FLOOR_ROUND_TRIPS=1`` (and the run's ``DATABASE_URL`` and ``REDIS_URL``) the
same proxy is a second floor, ``rules-X``: it also makes the round trips the gateway's money
and durability rules require, the way the gateway makes them, and nothing else. Before the
vendor call, a rate-limit script on Redis (EVALSHA, one key) and a hold in PostgreSQL (an
UPDATE that commits, coalesced as the escrow's: one statement in flight, the requests that
arrive meanwhile in the next); after the answer, before its last byte, a usage row journaled
to a Redis stream (XADD, ROW_BYTES of payload). Redis on core/shared_state.py's pipelined
connection, the holds through billing/coalescer.py, PostgreSQL through asyncpg. What the
gateway spends over this floor is its own logic (authentication, parsing, planning, limits,
money, rendering, the usage writer), not the rules' network work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

TARGET = "bare"  # its scenarios' target and prefix: bare-openai, bare-openai-stream, ...
RULES = "rules"  # the floor with the rules' round trips: rules-openai, ...
UPSTREAM_ENV = "BENCH_BARE_UPSTREAM"
ROUND_TRIPS_ENV = "BENCH_FLOOR_ROUND_TRIPS"
# The rules floor's own keys and table, apart from the gateway's (it shares their servers).
RPM_KEY = "bench:floor:rpm"
JOURNAL = "bench:floor:journal"
HOLDS = "bench_floor_holds"
ROW_BYTES = 1200  # about a journaled usage row's JSON (core/usage_record.py: 1.0-1.5 KB)
ROW = b"x" * ROW_BYTES
ADMIT = "local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) return n"
# Issue 44's targets, each set against the floor measured in the same run.
CPU_RATIO_MAX = 2.5  # gateway CPU per request over the bare proxy's
SERIAL_ADDED_MAX_MS = 1.0  # one at a time: the gateway's p50 over the bare proxy's
BURST_RATIO_MAX = 3.0  # a paced burst: the gateway's added time to first token over the floor's
RSS_PER_STREAM_MAX_KB = 32.0
PEER_RPS_RATIO_MIN = 10.0  # requests per second over LiteLLM's (make bench-peer)
LOADS = ("openai", "openai-stream", "anthropic", "anthropic-stream")
# Client headers the stub reads (auth, shapes, its answer length); nothing else is sent on.
FORWARDED = frozenset(
    (b"content-type", b"authorization", b"x-api-key", b"anthropic-version", b"x-stub-words")
)


class RoundTrips:
    """The rules' round trips and nothing else (the module's docstring), made with the
    gateway's own pieces: core/shared_state.py's pipelined Redis connection and the escrow's
    Coalescer (billing/coalescer.py)."""

    def __init__(self, redis: Any, sha: str, database: Any) -> None:
        from billing.coalescer import Coalescer  # bench/run.py imports this module bare

        self._redis = redis
        self._sha = sha
        self._database = database
        self._holds = Coalescer(self._hold_batch)

    @classmethod
    async def connect(cls, redis_url: str, database_url: str) -> RoundTrips:
        import asyncpg  # the floor's alone: bench/run.py never needs it

        from core.shared_state import _Wire

        loop = asyncio.get_running_loop()
        url = urlsplit(redis_url)
        _, redis = await loop.create_connection(
            lambda: _Wire(loop), url.hostname or "127.0.0.1", url.port or 6379
        )
        trips = cls(redis, "", await asyncpg.connect(database_url))
        if url.path.strip("/"):
            await trips._call("SELECT", url.path.strip("/"))
        await trips._call("DEL", RPM_KEY, JOURNAL)
        trips._sha = (await trips._call("SCRIPT", "LOAD", ADMIT)).decode()
        await trips._database.execute(
            f"DROP TABLE IF EXISTS {HOLDS}; CREATE TABLE {HOLDS} (id int PRIMARY KEY, "
            f"held bigint NOT NULL); INSERT INTO {HOLDS} VALUES (1, 0)"
        )
        return trips

    async def _call(self, *command: Any) -> Any:
        (reply,) = await self._redis.send([command])
        if isinstance(reply, Exception):  # an error reply: the request fails, the run counts it
            raise reply
        return reply

    async def admit(self) -> None:
        await self._call("EVALSHA", self._sha, 1, RPM_KEY, 1)

    async def hold(self) -> None:
        await self._holds.submit(HOLDS, None)

    async def _hold_batch(self, key: str, items: list) -> list:
        await self._database.fetchval(
            f"UPDATE {HOLDS} SET held = held + $1 WHERE id = 1 RETURNING held", len(items)
        )
        return [None] * len(items)

    async def journal(self) -> None:
        await self._call("XADD", JOURNAL, "*", "row", ROW)

    async def close(self) -> None:
        self._redis.close()
        await self._database.close()


class BareProxy:
    """An ASGI app that forwards each POST to `upstream` and streams the answer back."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.session: aiohttp.ClientSession | None = None
        self.trips: RoundTrips | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["path"] == "/healthz":
            await _answer(send, 200, b"ok")
        else:
            await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0),
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                    skip_auto_headers=("User-Agent",),
                )
                if os.environ.get(ROUND_TRIPS_ENV):
                    self.trips = await RoundTrips.connect(
                        os.environ["REDIS_URL"], os.environ["DATABASE_URL"]
                    )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                if self.trips is not None:
                    await self.trips.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode(): v.decode() for k, v in scope["headers"] if k in FORWARDED}
        assert self.session is not None
        if self.trips is not None:
            await self.trips.admit()
            await self.trips.hold()
        async with self.session.post(
            self.upstream + scope["path"], data=body, headers=headers
        ) as r:
            await send(
                {
                    "type": "http.response.start",
                    "status": r.status,
                    "headers": [(b"content-type", r.headers.get("content-type", "").encode())],
                }
            )
            async for chunk in r.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if self.trips is not None:
            await self.trips.journal()
        await send({"type": "http.response.body", "body": b""})


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body})


app = BareProxy(os.environ.get(UPSTREAM_ENV, "http://127.0.0.1:1"))


# --------------------------------------------------------------------------- bench/run.py's side


def start(
    env: dict[str, str],
    servers: Any,
    tmp: Path,
    start_server: Callable[..., tuple[Any, str]],
    proc: type,
    *,
    rules: bool = False,
) -> Any:
    """Start the bare proxy on `servers`' stub with run.py's `start_gateway` (the rules floor
    with `rules`: the run's database and Redis in `env`); return run.Servers naming it as the
    gateway (its own key, which the stub sees)."""
    extra = {ROUND_TRIPS_ENV: "1"} if rules else {}
    started, url = start_server(
        {**env, UPSTREAM_ENV: servers.stub_url, **extra},
        tmp,
        app="bench.bare:app",
        name=RULES if rules else TARGET,
        proc=proc,
    )
    return dataclasses.replace(servers, gateway=started, gw_url=url, api_key="sk-bench-bare")


@dataclass
class Round:
    """One pass over the scenarios (and the paced streams): run.Result and paced.PacedResult."""

    results: list[Any]
    paced: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None
    limit: float | None  # None: a reading with no target (the rules floor's)
    at_least: bool = False  # the value must be >= limit (else <=)

    def met(self) -> bool | None:
        if self.value is None or self.limit is None:
            return None
        return self.value >= self.limit if self.at_least else self.value <= self.limit


def targets(one: Round) -> list[Target]:
    """Issue 44's targets for one round, each a ratio or a difference taken in that round."""
    by_name = {r.name: r for r in one.results}
    out = []
    for load in LOADS:
        gw, floor = by_name.get("gw-" + load), by_name.get(f"{TARGET}-{load}")
        out.append(
            Target(
                f"cpu/req {load}: gw / bare",
                _ratio(gw and gw.gateway_cpu_ms_per_req, floor and floor.gateway_cpu_ms_per_req),
                CPU_RATIO_MAX,
            )
        )
    out += _rules_readings(by_name)
    gw, floor = by_name.get("gw-openai-serial"), by_name.get(f"{TARGET}-openai-serial")
    added = (
        None
        if not (gw and floor) or None in (gw.p50_ms, floor.p50_ms)
        else gw.p50_ms - floor.p50_ms
    )
    out.append(Target("p50 one at a time: gw - bare (ms)", added, SERIAL_ADDED_MAX_MS))
    by_run = {(r.target, r.shape, r.n): r for r in one.paced}
    for (target, shape, n), r in by_run.items():
        stub, floor = by_run.get(("stub", shape, n)), by_run.get((TARGET, shape, n))
        if target != "gw" or stub is None:
            continue
        gw_added = _minus(r.ttft_p50_ms, stub.ttft_p50_ms)
        floor_added = _minus(floor and floor.ttft_p50_ms, stub.ttft_p50_ms)
        out.append(
            Target(
                f"{n} streams {shape}: +ttft p50 gw / bare",
                _ratio(gw_added, floor_added),
                BURST_RATIO_MAX,
            )
        )
        # A process that held as many streams before reuses their freed memory: its reading
        # is low and says nothing (bench/paced.py's `*`), so only a first hold counts.
        memory = None if r.rss_reused else r.rss_per_stream_kb
        out.append(Target(f"{n} streams {shape}: gw KB per stream", memory, RSS_PER_STREAM_MAX_KB))
    failed = sum(
        r.failed + r.warmup_failed + r.gateway_error_logs for r in one.results if r.target == "gw"
    )
    failed += sum(r.failed + r.gateway_error_logs for r in one.paced if r.target == "gw")
    out.append(Target("gateway errors", float(failed), 0.0))
    for load in LOADS:
        gw, peer = by_name.get("gw-" + load), by_name.get("peer-" + load)
        if peer is not None:
            out.append(
                Target(
                    f"req/s {load}: gw / LiteLLM",
                    _ratio(gw and gw.rps, peer.rps),
                    PEER_RPS_RATIO_MIN,
                    at_least=True,
                )
            )
    return out


def _rules_readings(by_name: dict[str, Any]) -> list[Target]:
    """Where the rules floor ran: what its round trips cost over the bare proxy, and the
    gateway over it (readings, not targets)."""
    out = []
    for load in LOADS:
        rules, floor = by_name.get(f"{RULES}-{load}"), by_name.get(f"{TARGET}-{load}")
        if rules is None:
            continue
        gw = by_name.get("gw-" + load)
        rules_cpu = rules.gateway_cpu_ms_per_req
        out.append(
            Target(
                f"cpu/req {load}: rules / bare",
                _ratio(rules_cpu, floor and floor.gateway_cpu_ms_per_req),
                None,
            )
        )
        gw_cpu = gw and gw.gateway_cpu_ms_per_req
        out.append(Target(f"cpu/req {load}: gw / rules", _ratio(gw_cpu, rules_cpu), None))
    rules, floor = by_name.get(f"{RULES}-openai-serial"), by_name.get(f"{TARGET}-openai-serial")
    if rules is not None:
        added = None if floor is None else _minus(rules.p50_ms, floor.p50_ms)
        out.append(Target("p50 one at a time: rules - bare (ms)", added, None))
    return out


def report(rounds: list[Round]) -> str:
    """Each target in each round, the median over the rounds, and the verdict on the median."""
    per_round = [targets(one) for one in rounds]
    names = list(dict.fromkeys(t.name for ts in per_round for t in ts))
    rows = []
    for name in names:
        found = [next((t for t in ts if t.name == name), None) for ts in per_round]
        values = [t.value for t in found if t is not None and t.value is not None]
        first = next(t for t in found if t is not None)
        median = Target(
            name, statistics.median(values) if values else None, first.limit, first.at_least
        )
        verdict = {None: "-", True: "ok", False: "MISSED"}[median.met()]
        rows.append(
            [
                name,
                *(_fmt(t.value if t is not None else None) for t in found),
                _fmt(median.value),
                "-"
                if median.limit is None
                else ("≥ " if median.at_least else "≤ ") + f"{median.limit:g}",
                verdict,
            ]
        )
    headers = [
        "issue 44 targets",
        *(f"round {i + 1}" for i in range(len(rounds))),
        "median",
        "target",
        "verdict",
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    lines = [
        "  ".join(
            str(v).ljust(w) if i == 0 else str(v).rjust(w)
            for i, (v, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in [headers, *rows]
    ]
    return "\n".join(lines)


def report_json(rounds: list[Round]) -> list[list[dict[str, Any]]]:
    return [[dataclasses.asdict(t) | {"met": t.met()} for t in targets(one)] for one in rounds]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b or b <= 0 else a / b


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
