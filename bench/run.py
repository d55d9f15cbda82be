"""Tollgate gateway benchmark: the stub vendor directly vs. the same calls through the gateway.

Run (from the repository root, with the venv active)::

    python bench/run.py                       # --n 2000 --c 32, embedded (SQLite, no Redis)
    python bench/run.py --n 500 --c 1 --only gw-openai,stub-openai
    python bench/run.py --database-url postgres://... --redis-url redis://... --json out.json
    python bench/run.py --peer litellm        # also LiteLLM's proxy (`make bench-peer`)
    python bench/run.py --only paced --paced-streams 100,300,1000 --database-url ... --redis-url ...

What it does
------------
1. Starts the stub vendor (``python -m stubvendor.server --port 0``), migrates a fresh
   database (embedded: SQLite under a temp ``TOLLGATE_VAR_DIR``), runs ``seed_demo`` against
   the stub, lifts the demo group's limits and budget to huge values (so the full path --
   auth, rate limits, budget hold, escrow, usage accounting -- runs but never refuses), then
   starts the gateway under uvicorn (1 worker, uvloop, httptools) and waits for ``/healthz``.
2. Runs each scenario: a warm-up of min(200, n/10) requests (not measured), then n requests
   at concurrency c from this process (one aiohttp session, connection pool limit c).
   ``stub-*`` scenarios call the stub directly; ``gw-*`` scenarios send the same request
   through the gateway.  ``*-serial`` scenarios run n/4 non-streamed requests at c=1.
   Every response is checked: status 200; non-streams must report the expected
   ``completion_tokens`` / ``output_tokens``; streams must end properly (``data: [DONE]`` /
   ``event: message_stop``) and report the expected usage in their last usage event.
   The response cache's scenarios (``gw-openai-hit``, ``gw-openai-stream-hit``,
   ``gw-openai-hit-serial``, ``gw-openai-miss``, ``gw-openai-stream-miss``) send
   ``X-Tollgate-Cache-TTL: 600`` (the demo's models are cacheable) and every measured answer
   must also say ``X-Tollgate-Cache: hit`` / ``miss``.  A hit scenario sends one body over and
   over (its warm-up, at least one request, stores the answer; its status is not checked); a
   miss scenario makes every body unique (a run tag and a counter in the message), so each
   request goes to the stub and its answer is stored.
   The guardrail scenarios (``gw-openai-guarded``, ``gw-openai-stream-guarded``, each right
   after its plain twin) send the same requests with a second key of the demo group made at
   setup, which carries two guardrails that never match the prompt or the stub's answer
   (bench/guarded.py): what checking costs.
3. Stops both processes (SIGTERM, SIGKILL after 5 s) and deletes the temp dir, always.

``--peer litellm`` (``--peer-server granian|uvicorn``, ``--peer-workers N``; default granian x
2) also installs LiteLLM's proxy into ``var/peer-venv`` on first use, starts it on the same
stub and runs every ``gw-X`` load against it as ``peer-X``, right after ``gw-X``, measured the
same way (bench/peer.py says what it does and does not do per request).

The numbers
-----------
* ``req/s``: measured requests / wall time of the measured phase (warm-up excluded).
* ``p50`` / ``p99`` (ms): client-side latency of successful requests, from sending the
  request to the end of the body (for streams: the whole stream).
* ``ttfb50`` (ms, streams only): median time from sending the request to the first body
  bytes of the stream.
* ``cpu/req`` (ms): user+system CPU of the process that served the scenario (the stub for
  ``stub-*``, the gateway for ``gw-*``; read from ``/proc/<pid>/stat``, the process and any
  descendants) divided by the measured requests.  ``stub/req`` is the stub's CPU during
  the scenario: for ``gw-*`` rows it is the upstream's share, *excluded* from ``cpu/req``.
  ``client/req`` is this benchmark's own CPU (a saturated client caps every req/s figure).
* Comparison (each ``gw-X`` against ``stub-X``): ``rps ratio`` = gw req/s / stub req/s;
  ``+p50`` / ``+p99`` = gw latency - stub latency (the gateway's added latency at that
  concurrency); ``gw cpu/req`` against the design budget (<= 1 ms per non-streamed request,
  <= 1.5 ms per streamed request).  A cache scenario's baseline is its uncached twin's.
* Cache comparison (each cache scenario against its uncached twin: ``gw-openai-hit`` and
  ``gw-openai-miss`` against ``gw-openai``, the streamed ones against ``gw-openai-stream``,
  ``gw-openai-hit-serial`` against ``gw-openai-serial``): ``+p50`` and ``+cpu/req`` are the
  differences; ``cpu/miss`` = a hit's gateway cpu/req / the miss's of its kind (streamed or
  not).  Each row is judged by issue 40's target for it: a serial hit's ``+p50`` <= 1 ms, a
  hit's ``cpu/miss`` <= 0.5, a miss's ``+cpu/req`` <= 0.05 ms.  Run the twin (and for a hit
  the miss) in the same run, or the row shows ``-``.
* Guardrail comparison (bench/guarded.py; each ``*-guarded`` scenario against its plain
  twin): gateway ``cpu/req`` and ``p50`` of both and the differences (``+cpu/req``,
  ``+p50``), the gateway's guardrail verdict counts (every one should be ``clean``), and, from
  a child process with ``timeit``, the CPU per request a request with no guardrail attached
  spends on guardrails (``guard_input``, then ``guard_answer`` or ``answer_guard``), in
  microseconds, set against the twin's ``cpu/req``.  ``--json``: ``guardrail_comparisons``,
  ``guardrail_verdicts``, ``no_guardrail_cost``.

Paced streams
-------------
``--paced-streams N[,N...]`` adds, after the scenarios above (``--only paced``: instead of
them), the paced-streams scenario (bench/paced.py): for each N and each shape of
``--paced-shapes`` (default ``openai,anthropic``), N concurrent streams sent at once straight
to the stub, then N through the gateway, every one paced by the stub (its ``slow`` fault:
``--pace-ms``, default 500, before each of the 8 tokens, set through ``POST /_stub/faults``).
It reports TTFB and time to the first token (p50/p99/max), total time, failures, RSS per open
stream (VmRSS with every stream open minus VmRSS before, over the open streams), and the
serving process's CPU while the streams open and over the whole run; and, per N, what the
gateway adds to the stub's figures. bench/paced.py's docstring defines each column.
``make bench`` runs it with ``PACED_STREAMS`` (default 1000) streams.

Answers are the stub's default 8 words everywhere: the gateway does not forward client
headers to the vendor, so ``x-stub-words`` cannot change the answer length of ``gw-*``
requests.  ``--words N`` (N != 8) sends ``x-stub-words: N`` on every request and expects N
tokens from ``stub-*`` scenarios but still 8 from ``gw-*`` ones (an unequal comparison).

Failures: a request fails on a timeout (30 s), a connection error, a non-200 status or a
wrong body (printed by kind with examples).  ``gw ERR logs`` counts the ERROR/CRITICAL
lines the gateway wrote to stderr during a scenario's measured phase (e.g. a settlement
that could not be written): the client got its answer, but the measured path did not
complete, so such a scenario is flagged ``[GW ERRORS]``.

Tenant fairness (``--fairness``, bench/fairness.py)
--------------------------------------------------
Runs instead of the scenarios above: two tenants with real rpm limits, a victim sending
``--fair-victim-rps`` (20) non-streamed requests per second open loop (fixed send times),
first alone, then while the flooder sends ``--fair-flood-factor`` (10) x its limit L
(``--fair-flood-rpm``, 1200) from its own process; phases of whole rate windows
(``--fair-phase-s``, 60), ``--fair-rounds`` rounds; ``--fair-control`` adds a phase where
the flooder sends GET /healthz at the same rate, ``--fair-flood-concurrency`` gives it a
concurrency_limit.  It reports the victim's p50/p99 alone and under flood (also split into
the flooder's admitted burst at the window's start and the rest), their p99 ratio against
``--fair-max-ratio`` (1.20: PASS/FAIL), the flooder's admitted/refused counts (refusals
must be LM-3001 in our error format, admissions exactly L per window), gateway CPU (and
its event loop's), Redis and PostgreSQL CPU, the CPU per refused request, and the
gateway's own latencies from the usage rows.  Example::

    python bench/run.py --fairness --fair-rounds 2 --fair-control \
        --database-url postgres://... --redis-url redis://... --json fair.json

It deletes the ``tollgate:*`` keys of the Redis database it is given first.  Exit code: 0
on PASS with every check passed, 1 otherwise, 2 when setup failed.

Exit code: 0 when every request of every scenario (paced ones included) succeeded and the
gateway logged no error, 1 otherwise (including a scenario aborted by its time limit or by a
server process dying, a bench guardrail that matched, or the no-guardrail measure failing),
2 when setup failed (also: too low an RLIMIT_NOFILE for the paced streams), 130 when
interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import functools
import itertools
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import bare  # bench/bare.py: the floor, a bare proxy on the same server stack
import fairness
import guarded  # bench/guarded.py: the gw loads with a key that carries guardrails
import login_flood  # bench/login_flood.py: --login-flood, one process vs. two planes
import orjson
import paced  # bench/paced.py: the paced-streams scenario (the script's directory is on the path)
import scale  # bench/scale.py: --scale, a bulk-loaded ledger
import traced  # bench/traced.py: the gw loads through gateways that trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORDS = 8  # the stub's default answer length, the only one the gateway ever gets
REQUEST_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0
START_TIMEOUT_S = 60.0
SETUP_TIMEOUT_S = 300.0
BUDGET_MS = {False: 1.0, True: 1.5}  # design budget: gateway CPU ms per request (stream?)
OPENAI_MODEL = "gpt-4o-mini"
# The demo's profile of three platform keys (seed_demo), weighted, each call one Redis pick.
POOLED_MODEL = "gpt-4o-mini-pooled"
# The demo's platform vendors (seed_demo), each on the stub.
BEDROCK_MODEL = "bedrock-haiku"
AZURE_MODEL = "azure-gpt-4o-mini"
GEMINI_MODEL = "gemini-2.5-flash"
VERTEX_MODEL = "vertex-gemini-flash"
ANTHROPIC_MODEL = "claude-3-5-haiku"
PROMPT = "Say hello to the benchmark"
# The response cache (gateway/cache/): what a cache scenario's requests ask, what answers say.
CACHE_TTL_HEADER = "x-tollgate-cache-ttl"
CACHE_STATUS_HEADER = "x-tollgate-cache"
CACHE_TTL_S = 600
HIT, MISS = "hit", "miss"
# Issue 40's speed targets for the cache: a hit adds at most 1 ms p50 one request at a time
# and costs at most half a miss's gateway CPU; a miss costs at most 0.05 ms more CPU.
HIT_MAX_ADDED_P50_MS = 1.0
HIT_MAX_SHARE_OF_MISS_CPU = 0.5
MISS_MAX_ADDED_CPU_MS = 0.05
CLK_TCK = os.sysconf("SC_CLK_TCK")
MAX_EXAMPLES = 5
ALLOWED_PREFIXED = (
    "TOLLGATE_VAR_DIR",
    "TOLLGATE_LOG_LEVEL",
    "TOLLGATE_INFLIGHT_MAX",
    "TOLLGATE_CALLER_KEY",
    "TOLLGATE_RECEIPT_KEYS",
    "TOLLGATE_REDIS_PERSISTENCE",
    "TOLLGATE_LOGIN_FAILURES",  # --login-flood: sign-in throttling off
    "TOLLGATE_SECURE_COOKIES",  # --login-flood: plain-http cookies
)


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    # "stub", "bare" or "rules" (bench/bare.py), "gw" or "peer" (--peer: bench/peer.py)
    target: str
    shape: str  # "openai", "anthropic" or "search" (web acquisition)
    stream: bool
    serial: bool = False
    # The response cache (gw only): HIT or MISS, what every measured answer must say in
    # X-Tollgate-Cache; each request asks for caching (X-Tollgate-Cache-TTL).
    cache: str | None = None
    # Tracing (gw only): "trace100" or "trace1", a gateway of its own sampling 100 % or 1 %
    # of requests, exporting to a sink (bench/traced.py).
    traced: str | None = None
    # Guardrails (gw only): sent with a key that carries two guardrails (bench/guarded.py).
    guarded: bool = False

    @property
    def uncached(self) -> str:
        """The scenario of the same load without the cache, tracing or guardrails (itself
        when it uses none)."""
        name = self.name.replace(f"-{self.cache}", "") if self.cache else self.name
        name = name.replace(f"-{self.traced}", "") if self.traced else name
        return name.removesuffix(f"-{guarded.SUFFIX}") if self.guarded else name

    @property
    def baseline(self) -> str | None:
        return None if self.target == "stub" else "stub-" + self.uncached.split("-", 1)[1]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("stub-openai", "stub", "openai", False),
    # The floor (bench/bare.py): the same load through a proxy that does nothing in between.
    Scenario("bare-openai", "bare", "openai", False),
    # The floor with the rules' round trips (bench/bare.py; PostgreSQL and Redis runs only).
    Scenario("rules-openai", "rules", "openai", False),
    Scenario("gw-openai", "gw", "openai", False),
    # Guardrails: the same load with a key carrying two that never match (their checking).
    Scenario("gw-openai-guarded", "gw", "openai", False, guarded=True),
    # The response cache, right after its uncached twin (their CPU is compared): every body
    # unique (each a miss, stored), or every body the same (the warm-up stores it: hits).
    Scenario("gw-openai-miss", "gw", "openai", False, cache=MISS),
    Scenario("gw-openai-hit", "gw", "openai", False, cache=HIT),
    # Tracing: the same load through gateways that trace every request, or 1 % of them.
    Scenario("gw-openai-trace100", "gw", "openai", False, traced="trace100"),
    Scenario("gw-openai-trace1", "gw", "openai", False, traced="trace1"),
    Scenario("stub-openai-stream", "stub", "openai", True),
    Scenario("bare-openai-stream", "bare", "openai", True),
    Scenario("rules-openai-stream", "rules", "openai", True),
    Scenario("gw-openai-stream", "gw", "openai", True),
    Scenario("gw-openai-stream-guarded", "gw", "openai", True, guarded=True),
    Scenario("gw-openai-stream-trace100", "gw", "openai", True, traced="trace100"),
    Scenario("gw-openai-stream-trace1", "gw", "openai", True, traced="trace1"),
    Scenario("gw-openai-stream-miss", "gw", "openai", True, cache=MISS),
    Scenario("gw-openai-stream-hit", "gw", "openai", True, cache=HIT),
    Scenario("stub-anthropic", "stub", "anthropic", False),
    Scenario("bare-anthropic", "bare", "anthropic", False),
    Scenario("rules-anthropic", "rules", "anthropic", False),
    Scenario("gw-anthropic", "gw", "anthropic", False),
    Scenario("stub-anthropic-stream", "stub", "anthropic", True),
    Scenario("bare-anthropic-stream", "bare", "anthropic", True),
    Scenario("rules-anthropic-stream", "rules", "anthropic", True),
    Scenario("gw-anthropic-stream", "gw", "anthropic", True),
    Scenario("stub-openai-serial", "stub", "openai", False, serial=True),
    Scenario("bare-openai-serial", "bare", "openai", False, serial=True),
    Scenario("rules-openai-serial", "rules", "openai", False, serial=True),
    Scenario("gw-openai-serial", "gw", "openai", False, serial=True),
    Scenario("gw-openai-hit-serial", "gw", "openai", False, serial=True, cache=HIT),
    # Web acquisition: a search through the gateway (units, daily budget, hold, wallet).
    Scenario("stub-search", "stub", "search", False),
    Scenario("gw-search", "gw", "search", False),
    # A profile of three platform keys (weighted, with rpm limits): the pick's cost.
    Scenario("gw-pooled", "gw", "pooled", False),
    # The platform vendors, on the demo's profiles for them (seed_demo), with OpenAI chat in.
    # Bedrock: each call SigV4-signed into Converse, its event stream read back; no stub twin
    # (a direct call would need signing).
    Scenario("gw-bedrock", "gw", "bedrock", False),
    Scenario("gw-bedrock-stream", "gw", "bedrock", True),
    # Azure: out to a deployment's path with its api-version and the api-key header; no stub
    # twin (gw-openai is the same work).
    Scenario("gw-azure", "gw", "azure", False),
    # Google: taken into generateContent at plan time and its answer back into chat; Vertex
    # with a service account's access token (minted at the stub's token endpoint once, then
    # cached).
    Scenario("gw-gemini", "gw", "gemini", False),
    Scenario("gw-vertex", "gw", "vertex", False),
)
# --peer: each gw-X has a twin peer-X, the same requests sent to another proxy on the same stub.
PEER_SCENARIOS: tuple[Scenario, ...] = tuple(
    Scenario("peer-" + s.name[3:], "peer", s.shape, s.stream, s.serial)
    for s in SCENARIOS
    # a peer model proxy has no web search, and is set up for neither the pool nor a platform
    # vendor nor a cache nor guardrails
    if s.target == "gw"
    and s.cache is None
    and s.traced is None
    and not s.guarded
    and s.shape not in ("search", "pooled", "bedrock", "azure", "gemini", "vertex")
)
BY_NAME = {s.name: s for s in SCENARIOS + PEER_SCENARIOS}


@dataclass
class Result:
    name: str
    target: str
    stream: bool
    n: int
    c: int
    warmup: int
    ok: int = 0
    failed: int = 0
    warmup_failed: int = 0
    aborted: str | None = None
    elapsed_s: float = 0.0
    rps: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    ttfb_p50_ms: float | None = None
    ttfb_p99_ms: float | None = None
    serving_cpu_ms_per_req: float | None = None
    gateway_cpu_ms_per_req: float | None = None
    stub_cpu_ms_per_req: float | None = None
    client_cpu_ms_per_req: float | None = None
    gateway_error_logs: int = 0
    gateway_error_examples: list[str] = field(default_factory=list)
    failure_kinds: dict[str, int] = field(default_factory=dict)
    failure_examples: list[str] = field(default_factory=list)

    @property
    def flag(self) -> str:
        if self.failed or self.warmup_failed or self.aborted:
            return " [FAILED]"
        return " [GW ERRORS]" if self.gateway_error_logs else ""

    @property
    def bad(self) -> bool:
        return bool(self.failed or self.warmup_failed or self.aborted or self.gateway_error_logs)


# --------------------------------------------------------------------------- processes


def _die_with_parent() -> None:
    """preexec_fn: ask Linux to SIGKILL the child if the benchmark itself dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@functools.cache
def run_secrets() -> dict[str, str]:
    """This run's keys, made once: every process of a run (the gateway, the traced and bare
    ones) reads the platform keys the seed sealed, so all must unseal with the same keys."""
    return {
        "SECRET_KEY": "bench-secret-key-" + secrets.token_urlsafe(32),
        "SEALING_KEYS": "v1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "TOLLGATE_CALLER_KEY": "bench-caller-key-" + secrets.token_urlsafe(32),
        "TOLLGATE_RECEIPT_KEYS": "r1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    }


def child_env(var_dir: str, database_url: str | None, redis_url: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOLLGATE_", "GATEWAY_"))
        and k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "SEALING_KEYS")
    }
    env["TOLLGATE_VAR_DIR"] = var_dir
    env["TOLLGATE_LOG_LEVEL"] = "WARNING"
    env["TOLLGATE_INFLIGHT_MAX"] = "100000"
    env["PYTHONUNBUFFERED"] = "1"
    if database_url:
        env["DATABASE_URL"] = database_url
        env.update(run_secrets())
    if redis_url:
        env["REDIS_URL"] = redis_url
        # The benchmark measures the request path, not Redis's disk: any Redis is fine here.
        env["TOLLGATE_REDIS_PERSISTENCE"] = "none"
    assert all(k in ALLOWED_PREFIXED for k in env if k.startswith(("TOLLGATE_", "GATEWAY_"))), (
        "only the allowed TOLLGATE_ variables may reach the children"
    )
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - local URL
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Proc:
    """A child process with its stdout/stderr in files under the temp dir (or both in stderr's)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        logdir: Path,
        merge_stdout: bool = False,
    ) -> None:
        self.name = name
        self.out_path = logdir / f"{name}.stdout"
        self.err_path = logdir / f"{name}.stderr"
        self._out = self.out_path.open("wb")
        self._err = self.err_path.open("wb")
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._err if merge_stdout else self._out,
            stderr=self._err,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads started yet
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(STOP_GRACE_S)
        self._out.close()
        self._err.close()

    def stderr_size(self) -> int:
        try:
            return self.err_path.stat().st_size
        except OSError:
            return 0

    def stderr_since(self, offset: int) -> str:
        try:
            with self.err_path.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def is_error_line(self, line: str) -> bool:
        """An ERROR/CRITICAL line of this process's stderr (Tollgate's log format)."""
        return " ERROR " in line or " CRITICAL " in line

    def stderr_tail(self, lines: int = 30) -> str:
        self._err.flush()
        return tail(self.err_path, lines)


class FloorProc(Proc):
    """The bare proxy (bench/bare.py): uvicorn's own log format."""

    def is_error_line(self, line: str) -> bool:
        return line.startswith(("ERROR:", "CRITICAL:", "Traceback "))


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime+stime ticks) of one process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    rest = data[data.rindex(b")") + 2 :].split()  # fields 3.. (after "pid (comm) ")
    return int(rest[1]), int(rest[11]) + int(rest[12])  # field 4 ppid; fields 14, 15


def descendants(pid: int) -> list[int]:
    """pid's descendants (uvicorn --workers 1 runs in-process, but check rather than trust)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(int(entry))
            if st is not None:
                children.setdefault(st[0], []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cpu_ms(pid: int) -> float:
    """User+system CPU (ms) of pid and its live descendants."""
    total = 0
    for p in [pid, *descendants(pid)]:
        st = _proc_stat(p)
        if st is not None:
            total += st[1]
    return total * 1000.0 / CLK_TCK


def own_cpu_ms() -> float:
    t = os.times()
    return (t.user + t.system) * 1000.0


# --------------------------------------------------------------------------- setup


@dataclass
class Servers:
    stub: Proc
    gateway: Proc
    stub_url: str
    gw_url: str
    api_key: str
    group_id: int


def run_manage(args: list[str], env: dict[str, str]) -> str:
    cmd = [sys.executable, "manage.py", *args]
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(cmd[1:3])}` failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return done.stdout


def start_stub(env: dict[str, str], logdir: Path) -> tuple[Proc, str]:
    stub = Proc(
        "stub",
        [sys.executable, "-m", "stubvendor.server", "--host", "127.0.0.1", "--port", "0"],
        env,
        logdir,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    prefix = "stub listening on "
    while time.monotonic() < deadline:
        first = stub.out_path.read_text(errors="replace").split("\n", 1)
        if len(first) == 2 and first[0].startswith(prefix):
            url = first[0][len(prefix) :].strip().rstrip("/")
            if http_get(url + "/_stub/health") == 200:
                return stub, url
        if not stub.alive():
            break
        time.sleep(0.05)
    raise RuntimeError(f"stub did not start; stderr:\n{stub.stderr_tail()}")


def start_gateway(
    env: dict[str, str],
    logdir: Path,
    *,
    app: str = "config.asgi:application",
    name: str = "gateway",
    proc: type[Proc] = Proc,
    wrapper: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> tuple[Proc, str]:
    """Start `app` (the gateway, or bench/bare.py's floor on the same flags) under uvicorn;
    `wrapper` runs it under another program (bench/instructions.py: valgrind)."""
    port = free_port()
    argv = [
        *wrapper, sys.executable, "-m", "uvicorn", app,
        "--host", "127.0.0.1", "--port", str(port),
        "--loop", "uvloop", "--http", "httptools", "--no-access-log",
        "--workers", "1", "--log-level", "warning",
    ]  # fmt: skip
    gateway = proc(name, argv, {**env, **(extra_env or {})}, logdir)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + start_timeout_s
    while time.monotonic() < deadline:
        if http_get(url + "/healthz") == 200:
            return gateway, url
        if not gateway.alive():
            break
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not start; stderr:\n{gateway.stderr_tail()}")


def setup(
    args: argparse.Namespace,
    tmp: Path,
    procs: list[Proc],
    start: Callable[..., tuple[Proc, str]] = start_gateway,
) -> Servers:
    env = child_env(str(tmp / "var"), args.database_url, args.redis_url)
    stub, stub_url = start_stub(env, tmp)
    procs.append(stub)
    run_manage(["migrate", "--noinput"], env)
    seeded: dict[str, Any] | None = None
    for line in run_manage(["seed_demo", "--stub-url", stub_url], env).splitlines():
        line = line.strip()
        if line.startswith("{"):
            seeded = json.loads(line)
    if not seeded or "api_key" not in seeded or "group_id" not in seeded:
        raise RuntimeError("seed_demo printed no JSON line with api_key and group_id")
    group_id = int(seeded["group_id"])
    # tpm_limit is a PositiveIntegerField: 10**12 fits SQLite's 64-bit integers but not a
    # Postgres `integer` column, so an external database gets the largest 32-bit value.
    tpm = 10**12 if not args.database_url else 2**31 - 1
    run_manage(
        [
            "shell",
            "-c",
            "from accounts.models import Group; "
            f"n = Group.objects.filter(pk={group_id}).update(budget_max_micro=10**15, "
            f"rpm_limit=10**9, tpm_limit={tpm}, concurrency_limit=100000); "
            "assert n == 1, n",
        ],
        env,
    )
    gateway, gw_url = start(env, tmp)
    procs.append(gateway)
    return Servers(stub, gateway, stub_url, gw_url, str(seeded["api_key"]), group_id)


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Prepared:
    url: str
    headers: dict[str, str]
    body: bytes
    check: Callable[[bytes], str | None]  # None when the body is right, else what is wrong
    # The X-Tollgate-Cache every answer must carry (None: not checked).
    cache_status: str | None = None
    # Makes each request's body instead of sending `body` every time.
    next_body: Callable[[], bytes] | None = None


def unique_bodies(payload: dict[str, Any]) -> Callable[[], bytes]:
    """Return a maker of payload's body with a message never sent before: a cache miss each,
    in this run and in any earlier one on the same Redis (the run's random tag)."""
    tag = secrets.token_hex(8)
    sent = itertools.count()
    first, *rest = payload["messages"]

    def next_body() -> bytes:
        message = {**first, "content": f"{first['content']} ({tag}-{next(sent)})"}
        return orjson.dumps({**payload, "messages": [message, *rest]})

    return next_body


def _sse_events(body: bytes) -> list[tuple[bytes, bytes]]:
    """(event name, data) pairs of an SSE body."""
    events = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = b"", []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip()
            elif line.startswith(b"data:"):
                data.append(line[5:].strip())
        if name or data:
            events.append((name, b"\n".join(data)))
    return events


def openai_check(expect: int, stream: bool) -> Callable[[bytes], str | None]:
    def check_plain(body: bytes) -> str | None:
        try:
            got = orjson.loads(body)["usage"]["completion_tokens"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return "bad-body"
        return None if got == expect else f"completion_tokens={got}"

    def check_stream(body: bytes) -> str | None:
        events = _sse_events(body)
        if not events or events[-1][1] != b"[DONE]":
            return "stream-not-done"
        for _, data in reversed(events[:-1]):
            if b'"usage"' not in data:
                continue
            try:
                usage = orjson.loads(data).get("usage")
            except orjson.JSONDecodeError:
                return "bad-chunk"
            if usage:
                got = usage.get("completion_tokens")
                return None if got == expect else f"stream completion_tokens={got}"
        return "stream-no-usage"

    return check_stream if stream else check_plain


def anthropic_check(expect: int, stream: bool) -> Callable[[bytes], str | None]:
    def check_plain(body: bytes) -> str | None:
        try:
            got = orjson.loads(body)["usage"]["output_tokens"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return "bad-body"
        return None if got == expect else f"output_tokens={got}"

    def check_stream(body: bytes) -> str | None:
        events = _sse_events(body)
        if not events or events[-1][0] != b"message_stop":
            return "stream-not-done"
        for name, data in reversed(events):
            if name == b"message_delta":
                try:
                    got = orjson.loads(data)["usage"]["output_tokens"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    return "bad-message_delta"
                return None if got == expect else f"stream output_tokens={got}"
        return "stream-no-message_delta"

    return check_stream if stream else check_plain


def search_check(body: bytes) -> str | None:
    try:
        got = len(orjson.loads(body)["results"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "bad-body"
    return None if got == 3 else f"results={got}"


def prepare(sc: Scenario, servers: Servers, words: int) -> Prepared:
    # The bare proxy sends the client's headers on (x-stub-words too); the gateway does not.
    expect = words if sc.target in ("stub", bare.TARGET, bare.RULES) else DEFAULT_WORDS
    key = "sk-bench-direct" if sc.target == "stub" else servers.api_key
    base = servers.stub_url if sc.target == "stub" else servers.gw_url
    headers = {"content-type": "application/json"}
    if words != DEFAULT_WORDS:
        headers["x-stub-words"] = str(words)
    max_tokens = max(256, 2 * words)
    messages = [{"role": "user", "content": PROMPT}]
    if sc.shape == "search":
        headers["authorization"] = f"Bearer {key}"
        path = "/web/v1/search" if sc.target == "stub" else "/v1/web/search"
        return Prepared(
            base + path, headers, orjson.dumps({"query": PROMPT, "max_results": 3}), search_check
        )
    if sc.shape in ("openai", "pooled", "bedrock", "azure", "gemini", "vertex"):
        headers["authorization"] = f"Bearer {key}"
        models = {
            "pooled": POOLED_MODEL,
            "bedrock": BEDROCK_MODEL,
            "azure": AZURE_MODEL,
            "gemini": GEMINI_MODEL,
            "vertex": VERTEX_MODEL,
        }
        payload: dict[str, Any] = {
            "model": models.get(sc.shape, OPENAI_MODEL),
            "messages": messages,
            "max_tokens": max_tokens,
            "stream": sc.stream,
        }
        if sc.stream:
            payload["stream_options"] = {"include_usage": True}
        if sc.cache:
            headers[CACHE_TTL_HEADER] = str(CACHE_TTL_S)
        return Prepared(
            base + "/v1/chat/completions",
            headers,
            orjson.dumps(payload),
            openai_check(expect, sc.stream),
            cache_status=sc.cache,
            next_body=unique_bodies(payload) if sc.cache == MISS else None,
        )
    headers["x-api-key"] = key
    headers["anthropic-version"] = "2023-06-01"
    payload = {
        "model": ANTHROPIC_MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": sc.stream,
    }
    return Prepared(
        base + "/v1/messages", headers, orjson.dumps(payload), anthropic_check(expect, sc.stream)
    )


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    ttfbs: list[float] = field(default_factory=list)
    ok: int = 0
    failed: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def fail(self, kind: str, detail: str) -> None:
        self.failed += 1
        self.kinds[kind] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{kind}: {detail}"[:600])


async def one_request(
    session: aiohttp.ClientSession, prep: Prepared, stream: bool, tally: Tally
) -> None:
    sent = prep.next_body() if prep.next_body else prep.body
    t0 = time.perf_counter()
    ttfb: float | None = None
    try:
        async with session.post(prep.url, data=sent, headers=prep.headers) as resp:
            if stream and resp.status == 200:
                chunks = []
                async for chunk in resp.content.iter_any():
                    if ttfb is None:
                        ttfb = time.perf_counter() - t0
                    chunks.append(chunk)
                body = b"".join(chunks)
            else:
                body = await resp.read()
            elapsed = time.perf_counter() - t0
            status = resp.status
            cache_status = resp.headers.get(CACHE_STATUS_HEADER)
    except TimeoutError:
        tally.fail("timeout", f"no complete answer within {REQUEST_TIMEOUT_S:.0f}s")
        return
    except aiohttp.ClientError as exc:
        tally.fail(type(exc).__name__, repr(exc))
        return
    if status != 200:
        text = body[:400].decode("utf-8", "replace")
        tally.fail(f"HTTP {status}", text)
        return
    wrong = prep.check(body)
    if wrong is not None:
        tally.fail(wrong, body[-400:].decode("utf-8", "replace"))
        return
    if prep.cache_status is not None and cache_status != prep.cache_status:
        tally.fail(f"{CACHE_STATUS_HEADER}: {cache_status}", f"expected {prep.cache_status}")
        return
    tally.ok += 1
    tally.latencies.append(elapsed)
    if ttfb is not None:
        tally.ttfbs.append(ttfb)


class Watch:
    """Stops a scenario early when a server process dies or the scenario overruns."""

    def __init__(self, servers: Servers, deadline: float) -> None:
        self.servers = servers
        self.deadline = deadline
        self.reason: str | None = None

    def check(self) -> bool:
        if self.reason is None:
            if not self.servers.gateway.alive():
                self.reason = f"gateway exited with code {self.servers.gateway.popen.poll()}"
            elif not self.servers.stub.alive():
                self.reason = f"stub exited with code {self.servers.stub.popen.poll()}"
            elif time.monotonic() > self.deadline:
                self.reason = "scenario time limit reached"
        return self.reason is None


async def drive(
    session: aiohttp.ClientSession,
    prep: Prepared,
    stream: bool,
    n: int,
    c: int,
    watch: Watch,
) -> Tally:
    tally = Tally()
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0 and watch.check():
            remaining -= 1
            await one_request(session, prep, stream, tally)

    await asyncio.gather(*(worker() for _ in range(min(c, n))))
    return tally


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


async def clear_stub(session: aiohttp.ClientSession, stub_url: str) -> None:
    async with session.delete(stub_url + "/_stub/calls") as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"DELETE /_stub/calls answered {resp.status}")


async def run_scenario(
    sc: Scenario,
    servers: Servers,
    args: argparse.Namespace,
    cost: Callable[[int], float] = cpu_ms,
) -> Result:
    """Run one scenario; `cost` reads what the serving process has spent so far (its CPU ms;
    bench/instructions.py: millions of instructions)."""
    n = max(1, args.n // 4) if sc.serial else args.n
    c = 1 if sc.serial else args.c
    warm = min(200, n // 10)
    if sc.cache == HIT:
        warm = max(1, warm)  # the warm-up stores the answer every measured request hits
    result = Result(sc.name, sc.target, sc.stream, n, c, warm)
    prep = prepare(sc, servers, args.words)
    # A hit scenario's warm-up misses until the answer is stored: its status is not checked.
    warm_prep = replace(prep, cache_status=None) if sc.cache == HIT else prep
    watch = Watch(servers, time.monotonic() + args.scenario_timeout)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=c, limit_per_host=c)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await clear_stub(session, servers.stub_url)
        if warm:
            warm_tally = await drive(session, warm_prep, sc.stream, warm, c, watch)
            result.warmup_failed = warm_tally.failed
            result.failure_kinds.update({f"warm-up {k}": v for k, v in warm_tally.kinds.items()})
            result.failure_examples.extend(f"warm-up {e}" for e in warm_tally.examples)
        log_offset = servers.gateway.stderr_size()
        gw0, stub0, me0 = cost(servers.gateway.pid), cpu_ms(servers.stub.pid), own_cpu_ms()
        t0 = time.perf_counter()
        tally = await drive(session, prep, sc.stream, n, c, watch)
        result.elapsed_s = time.perf_counter() - t0
        gw1, stub1, me1 = cost(servers.gateway.pid), cpu_ms(servers.stub.pid), own_cpu_ms()
        await clear_stub(session, servers.stub_url)
    await asyncio.sleep(0.2)  # let the gateway finish settling and logging the last requests
    error_lines = [
        line
        for line in servers.gateway.stderr_since(log_offset).splitlines()
        if servers.gateway.is_error_line(line)
    ]
    result.gateway_error_logs = len(error_lines)
    result.gateway_error_examples = list(
        dict.fromkeys(line.split(" ", 3)[-1][:300] for line in error_lines)
    )[:MAX_EXAMPLES]
    done = tally.ok + tally.failed
    result.aborted = watch.reason
    result.ok, result.failed = tally.ok, tally.failed
    if done < n and result.aborted:
        result.failure_kinds["not sent (aborted)"] = n - done
    result.failure_kinds.update(tally.kinds)
    result.failure_examples.extend(tally.examples)
    result.rps = done / result.elapsed_s if result.elapsed_s > 0 else 0.0
    result.p50_ms = ms(percentile(tally.latencies, 0.50))
    result.p99_ms = ms(percentile(tally.latencies, 0.99))
    if sc.stream:
        result.ttfb_p50_ms = ms(percentile(tally.ttfbs, 0.50))
        result.ttfb_p99_ms = ms(percentile(tally.ttfbs, 0.99))
    if done:
        result.gateway_cpu_ms_per_req = (gw1 - gw0) / done
        result.stub_cpu_ms_per_req = (stub1 - stub0) / done
        result.client_cpu_ms_per_req = (me1 - me0) / done
        result.serving_cpu_ms_per_req = (
            result.stub_cpu_ms_per_req if sc.target == "stub" else result.gateway_cpu_ms_per_req
        )
        if sc.target != "stub" and gw1 <= gw0 and done >= 200:
            print(
                f"  WARNING: gateway pid {servers.gateway.pid} used no CPU during {sc.name}:"
                " the measured process is not the one doing the work",
                file=sys.stderr,
            )
    return result


# --------------------------------------------------------------------------- report


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    cells = enumerate(zip(headers, widths, strict=True))
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in cells)
    out = [line, "-" * len(line)]
    for r in rows:
        cells = enumerate(zip(r, widths, strict=True))
        out.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in cells))
    return "\n".join(out)


def comparisons(results: list[Result]) -> list[dict[str, Any]]:
    by_name = {r.name: r for r in results}
    out = []
    for r in results:
        base_name = BY_NAME[r.name].baseline
        base = by_name.get(base_name) if base_name else None
        if r.target == "stub":
            continue
        budget = BUDGET_MS[r.stream]
        cpu = r.gateway_cpu_ms_per_req
        out.append(
            {
                "scenario": r.name,
                "baseline": base.name if base else None,
                "rps_ratio": (r.rps / base.rps) if base and base.rps else None,
                "added_p50_ms": (
                    r.p50_ms - base.p50_ms
                    if base and r.p50_ms is not None and base.p50_ms is not None
                    else None
                ),
                "added_p99_ms": (
                    r.p99_ms - base.p99_ms
                    if base and r.p99_ms is not None and base.p99_ms is not None
                    else None
                ),
                "gateway_cpu_ms_per_req": cpu,
                "budget_ms": budget,
                "within_budget": None if cpu is None else cpu <= budget,
            }
        )
    return out


def cache_comparisons(results: list[Result]) -> list[dict[str, Any]]:
    """Set each cache scenario against its uncached twin (and a hit against the miss of its
    kind) and judge it by issue 40's target for it:
    - a hit one at a time (``*-hit-serial``): its p50 minus the uncached serial p50;
    - a hit: its gateway CPU per request over the miss's of the same kind (streamed or not);
    - a miss: its gateway CPU per request minus the uncached twin's."""
    by_name = {r.name: r for r in results}
    out = []
    for r in results:
        sc = BY_NAME[r.name]
        if not sc.cache:
            continue
        twin = by_name.get(sc.uncached)
        miss = by_name.get(sc.uncached + "-" + MISS) if sc.cache == HIT and not sc.serial else None
        cpu = r.gateway_cpu_ms_per_req
        added_p50 = _minus(r.p50_ms, twin.p50_ms if twin else None)
        added_cpu = _minus(cpu, twin.gateway_cpu_ms_per_req if twin else None)
        miss_cpu = miss.gateway_cpu_ms_per_req if miss else None
        share = cpu / miss_cpu if cpu is not None and miss_cpu else None
        if sc.cache == HIT and sc.serial:
            target, value, limit = "+p50", added_p50, HIT_MAX_ADDED_P50_MS
        elif sc.cache == HIT:
            target, value, limit = "cpu/miss", share, HIT_MAX_SHARE_OF_MISS_CPU
        else:
            target, value, limit = "+cpu", added_cpu, MISS_MAX_ADDED_CPU_MS
        out.append(
            {
                "scenario": r.name,
                "uncached": twin.name if twin else None,
                "added_p50_ms": added_p50,
                "added_cpu_ms_per_req": added_cpu,
                "miss": miss.name if miss else None,
                "cpu_share_of_miss": share,
                "target": f"{target} <= {limit:g}",
                "within_target": None if value is None else value <= limit,
            }
        )
    return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def report(
    results: list[Result], comps: list[dict[str, Any]], cache_comps: list[dict[str, Any]]
) -> str:
    headers = [
        "scenario", "n", "c", "ok", "fail", "req/s", "p50 ms", "p99 ms", "ttfb50 ms",
        "cpu/req ms", "stub/req ms", "client/req ms", "gw ERR logs",
    ]  # fmt: skip
    rows = []
    for r in results:
        stub_col = fmt(r.stub_cpu_ms_per_req, 3)
        if r.target != "stub" and r.stub_cpu_ms_per_req is not None:
            stub_col += " (excl)"
        rows.append(
            [
                r.name + r.flag,
                str(r.n),
                str(r.c),
                str(r.ok),
                str(r.failed + r.warmup_failed),
                fmt(r.rps, 1),
                fmt(r.p50_ms),
                fmt(r.p99_ms),
                fmt(r.ttfb_p50_ms),
                fmt(r.serving_cpu_ms_per_req, 3),
                stub_col,
                fmt(r.client_cpu_ms_per_req, 3),
                str(r.gateway_error_logs) if r.target != "stub" else "-",
            ]
        )
    parts = [render_table(rows, headers)]
    if comps:
        crow = []
        for cp in comps:
            verdict = (
                "-" if cp["within_budget"] is None else ("ok" if cp["within_budget"] else "OVER")
            )
            crow.append(
                [
                    cp["scenario"],
                    cp["baseline"] or "-",
                    fmt(cp["rps_ratio"], 3),
                    fmt(cp["added_p50_ms"]),
                    fmt(cp["added_p99_ms"]),
                    fmt(cp["gateway_cpu_ms_per_req"], 3),
                    f"{cp['budget_ms']:.1f}",
                    verdict,
                ]
            )
        parts.append(
            render_table(
                crow,
                [
                    "gateway vs stub",
                    "baseline",
                    "rps ratio",
                    "+p50 ms",
                    "+p99 ms",
                    "gw cpu/req ms",
                    "budget ms",
                    "budget",
                ],
            )  # fmt: skip
        )
    if cache_comps:
        crow = [
            [
                cp["scenario"],
                cp["uncached"] or "-",
                fmt(cp["added_p50_ms"]),
                fmt(cp["added_cpu_ms_per_req"], 3),
                cp["miss"] or "-",
                fmt(cp["cpu_share_of_miss"], 3),
                cp["target"],
                "-" if cp["within_target"] is None else ("ok" if cp["within_target"] else "OVER"),
            ]
            for cp in cache_comps
        ]
        headers = [
            "cache vs uncached", "uncached", "+p50 ms", "+cpu/req ms", "miss", "cpu/miss",
            "target", "verdict",
        ]  # fmt: skip
        parts.append(render_table(crow, headers))
    parts.append(
        "DESIGN budget (reference): <= 1 ms gateway CPU per non-streamed request, "
        "<= 1.5 ms per streamed request."
        + (
            "\nCache targets (issue 40): a hit adds <= 1 ms p50 one at a time and costs <= half "
            "a miss's gateway CPU; a miss costs <= 0.05 ms more CPU than the uncached path."
            if cache_comps
            else ""
        )
    )
    return "\n\n".join(parts)


def print_failures(results: list[Result]) -> None:
    for r in results:
        if not r.bad:
            continue
        print(
            f"\n{r.name}: {r.failed} failed, {r.warmup_failed} failed in warm-up, "
            f"{r.gateway_error_logs} gateway ERROR log lines"
            + (f", aborted: {r.aborted}" if r.aborted else "")
        )
        for kind, count in sorted(r.failure_kinds.items(), key=lambda kv: -kv[1]):
            print(f"  {count:6d} x {kind}")
        for example in r.failure_examples:
            print(f"  e.g. {example}")
        for example in r.gateway_error_examples:
            print(f"  gateway log: {example}")


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2000, help="requests per scenario (default 2000)")
    p.add_argument("--c", type=int, default=32, help="concurrency (default 32)")
    p.add_argument(
        "--words", type=int, default=DEFAULT_WORDS,
        help="answer words for stub-* scenarios (default 8; gw-* always get 8)",
    )  # fmt: skip
    p.add_argument("--database-url", default=None, help="external database (DATABASE_URL)")
    p.add_argument("--redis-url", default=None, help="Redis (REDIS_URL)")
    p.add_argument("--only", default="", help="comma-separated scenario names")
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (database, server logs)")
    p.add_argument(
        "--scenario-timeout", type=float, default=900.0,
        help="stop sending a scenario's requests after this many seconds (default 900)",
    )  # fmt: skip
    p.add_argument(
        "--peer", choices=("litellm",), default=None,
        help="also send every gw-* load to this other proxy on the same stub (peer-* rows; "
        "installed into var/peer-venv on first use: bench/peer.py, `make bench-peer`)",
    )  # fmt: skip
    p.add_argument(
        "--peer-server", choices=("granian", "uvicorn"), default="granian",
        help="the peer's ASGI server (default granian)",
    )  # fmt: skip
    p.add_argument("--peer-workers", type=int, default=2, help="peer worker processes (default 2)")
    p.add_argument(
        "--rounds", type=int, default=1,
        help="run the scenarios (and paced streams) this many times on the same servers; the "
        "targets table shows each round's figures and their median (default 1)",
    )  # fmt: skip
    paced.add_arguments(p)
    fairness.add_arguments(p)
    login_flood.add_arguments(p)
    scale.add_arguments(p)
    args = p.parse_args(argv)
    fairness.check_arguments(p, args)
    if min(args.n, args.c, args.words, args.peer_workers, args.rounds) < 1:
        p.error("--n, --c, --words, --peer-workers and --rounds must be positive")
    known = list(SCENARIOS)
    external = bool(args.database_url and args.redis_url)
    if args.peer:  # each peer-X runs right after its gw-X
        twin = {"gw-" + t.name[5:]: t for t in PEER_SCENARIOS}
        known = [x for s in SCENARIOS for x in ([s, twin[s.name]] if s.name in twin else [s])]
    if args.only:
        names = [x.strip() for x in args.only.split(",") if x.strip()]
        if "paced" in names:  # not a throughput scenario: --only paced runs the paced ones only
            if not args.paced_streams:
                p.error("--only paced needs --paced-streams N")
            names.remove("paced")
        unknown = [x for x in names if x not in BY_NAME]
        if unknown:
            p.error(f"unknown scenario(s) {unknown}; known: {', '.join(BY_NAME)}, paced")
        if not args.peer and any(BY_NAME[x].target == "peer" for x in names):
            p.error("peer-* scenarios need --peer")
        if not external and any(BY_NAME[x].target == bare.RULES for x in names):
            p.error("rules-* scenarios need --database-url and --redis-url")
        args.scenarios = [s for s in known if s.name in names]
    else:  # the rules floor makes its round trips on the run's PostgreSQL and Redis
        args.scenarios = [s for s in known if external or s.target != bare.RULES]
    return args


async def run_all(
    args: argparse.Namespace,
    servers: Servers,
    peer: Servers | None = None,
    traced_servers: dict[str, Servers] | None = None,
) -> list[Result]:
    results = []
    for sc in args.scenarios:
        print(f"running {sc.name} ...", flush=True)
        target = peer if sc.target == "peer" and peer else servers
        if sc.target in (bare.TARGET, bare.RULES) and traced_servers:
            target = traced_servers[sc.target]
        if sc.traced and traced_servers:
            target = traced_servers[sc.traced]
        if sc.guarded and traced_servers:
            target = traced_servers[guarded.SUFFIX]
        result = await run_scenario(sc, target, args)
        results.append(result)
        print(
            f"  {result.ok}/{result.n} ok, {result.rps:.1f} req/s, p50 {fmt(result.p50_ms)} ms,"
            f" cpu/req {fmt(result.serving_cpu_ms_per_req, 3)} ms"
            + (
                f", {result.gateway_error_logs} gateway ERROR log lines"
                if result.target != "stub"
                else ""
            )
            + result.flag,
            flush=True,
        )
        if result.aborted and not (target.gateway.alive() and target.stub.alive()):
            print("  a server process died: skipping the remaining scenarios", flush=True)
            break
    return results


def run_loop(coro_factory: Callable[[], Any]) -> Any:
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro_factory())
    except ImportError:
        return asyncio.run(coro_factory())


def start_peer(args: argparse.Namespace, servers: Servers, tmp: Path, procs: list[Proc]) -> Servers:
    """--peer: bench/peer.py installs and starts the other proxy; its Servers serve peer-*."""
    sys.modules.setdefault("run", sys.modules[__name__])  # peer.py's `import run` is this module
    import peer

    return peer.start(args, servers, tmp, procs)


def setup_failed(exc: BaseException, procs: list[Proc]) -> int:
    """Say why setup failed, with each started process's stderr tail; return exit code 2."""
    print(f"setup failed: {exc}", file=sys.stderr)
    for proc in procs:
        if proc.stderr_tail():
            print(f"--- {proc.name} stderr tail ---\n{proc.stderr_tail()}", file=sys.stderr)
    return 2


def stop_all(procs: list[Proc], tmp: Path, *, keep: bool) -> None:
    """Stop the servers, last started first, and delete the temp dir unless it is kept."""
    for proc in reversed(procs):
        proc.stop()
    if keep:
        print(f"kept {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fairness:
        return fairness.main(args)
    if args.login_flood:
        return login_flood.main(args)
    if args.scale:
        return scale.main(args)
    if args.paced_streams and (problem := paced.check_nofile(args)):
        print(f"setup failed: {problem}", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-bench-"))
    procs: list[Proc] = []
    results: list[Result] = []
    paced_results: list[paced.PacedResult] = []
    status = 0
    try:
        try:
            servers = setup(args, tmp, procs)
            wants_peer = any(s.target == "peer" for s in args.scenarios)
            peer = start_peer(args, servers, tmp, procs) if wants_peer else None
            tracings = {s.traced for s in args.scenarios if s.traced}
            env = child_env(str(tmp / "var"), args.database_url, args.redis_url)
            traced_servers = (
                traced.start(
                    env,
                    servers,
                    tmp,
                    procs,
                    tracings,
                    start_gateway,
                )
                if tracings
                else {}
            )
            if any(s.guarded for s in args.scenarios):  # the same gateway, another key
                traced_servers[guarded.SUFFIX] = guarded.start(servers, env, run_manage)
            if args.paced_streams or any(s.target == bare.TARGET for s in args.scenarios):
                floor = bare.start(env, servers, tmp, start_gateway, FloorProc)
                procs.append(floor.gateway)
                traced_servers[bare.TARGET] = floor
            if any(s.target == bare.RULES for s in args.scenarios):
                rules = bare.start(env, servers, tmp, start_gateway, FloorProc, rules=True)
                procs.append(rules.gateway)
                traced_servers[bare.RULES] = rules
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
            return setup_failed(exc, procs)
        print(
            f"stub {servers.stub_url} (pid {servers.stub.pid}), gateway {servers.gw_url} "
            f"(pid {servers.gateway.pid}, descendants {descendants(servers.gateway.pid)}), "
            f"{'external database' if args.database_url else 'embedded SQLite'}"
            f"{', Redis' if args.redis_url else ', no Redis'}; n={args.n} c={args.c}"
            f" words={args.words}; {os.cpu_count()} CPUs",
            flush=True,
        )
        if args.words != DEFAULT_WORDS:
            print(
                f"note: gw-* answers stay {DEFAULT_WORDS} words (client headers are not "
                f"forwarded) while stub-* answers are {args.words}: unequal comparison",
                flush=True,
            )
        rounds: list[bare.Round] = []
        held: Counter[str] = Counter()  # streams each process held: the same in every round
        for number in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"--- round {number} of {args.rounds} ---", flush=True)
            results = run_loop(lambda: run_all(args, servers, peer, traced_servers))
            paced_results = []
            if args.paced_streams and servers.gateway.alive() and servers.stub.alive():
                floor = traced_servers.get(bare.TARGET)
                paced_results = run_loop(
                    lambda: paced.run_paced(args, servers, sys.modules[__name__], floor, held)  # noqa: B023
                )
            rounds.append(bare.Round(results, paced_results))
            if any(r.bad for r in results + paced_results):
                break  # the report shows this round's failures
        ran_guarded = any(r.name.endswith("-" + guarded.SUFFIX) for r in results)
        checked = guarded.verdicts(servers.gw_url) if ran_guarded else None
        comps = comparisons(results)
        cache_comps = cache_comparisons(results)
        unguarded = guarded.measure(env, PROMPT, OPENAI_MODEL) if ran_guarded else None
        print()
        if results:
            print(report(results, comps, cache_comps))
            if traced.report(results):
                print("\n" + traced.report(results))
            if guarded.report(results, unguarded, checked):
                print("\n" + guarded.report(results, unguarded, checked))
            print_failures(results)
        if guarded.problem(checked, unguarded):
            print(f"\nguardrails: {guarded.problem(checked, unguarded)}")
        if paced_results:
            print("\n" + paced.report(paced_results, sys.modules[__name__]))
            paced.print_failures(paced_results)
        if any(r.target in (bare.TARGET, bare.RULES, "peer") for r in results + paced_results):
            print("\n" + bare.report(rounds))
        paced_want = len(args.paced_streams) * len(args.paced_shapes) * 3
        if (
            any(r.bad for r in results)
            or len(results) < len(args.scenarios)
            or any(r.bad for r in paced_results)
            or len(paced_results) < paced_want
            or len(rounds) < args.rounds
            or guarded.problem(checked, unguarded) is not None
        ):
            status = 1
            for proc in reversed(procs):  # the peer's (if any), the gateway's, the stub's
                text = proc.stderr_tail(40)
                print(f"\n--- {proc.name} stderr tail ---\n{text or '(empty)'}")
        else:
            gw_err = servers.gateway.stderr_tail(20)
            if gw_err:
                print(f"\n--- gateway stderr tail (run succeeded) ---\n{gw_err}")
        if args.json:
            doc = {
                "args": {
                    "n": args.n,
                    "c": args.c,
                    "words": args.words,
                    "database": "external" if args.database_url else "embedded-sqlite",
                    "redis": bool(args.redis_url),
                    "scenarios": [s.name for s in args.scenarios],
                    "peer": getattr(args, "peer_info", None),
                    "paced_streams": args.paced_streams,
                    "pace_ms": args.pace_ms,
                },
                "host": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                },
                "budget_ms": {"non_stream": BUDGET_MS[False], "stream": BUDGET_MS[True]},
                "results": [asdict(r) for r in results],
                "comparisons": comps,
                "cache_comparisons": cache_comps,
                "tracing_comparisons": traced.comparisons(results),
                "guardrail_comparisons": guarded.comparisons(results),
                "guardrail_verdicts": checked,
                "no_guardrail_cost": unguarded,
                "paced": paced.as_json(paced_results),
                "targets": bare.report_json(rounds),
                "ok": status == 0,
            }
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
            print(f"\nwrote {args.json}")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    finally:
        stop_all(procs, tmp, keep=args.keep)
    return status


if __name__ == "__main__":
    sys.exit(main())
