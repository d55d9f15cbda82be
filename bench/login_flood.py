"""Login flood: chat latency while password logins hammer the dashboard, one process vs. two planes.

``python bench/run.py --login-flood --database-url postgres://... --redis-url redis://...``
(see bench/LOGIN_FLOOD.md for the method and figures).  Setup as run.py's: the stub vendor,
``migrate``, ``seed_demo`` against the stub, the demo group's limits and budget lifted out of
reach (the whole request path runs, nothing is refused), plus one Django user
(``bench-login``) with a random password.  The Redis database given is cleared of
``tollgate:*`` keys first.  Every server runs with ``TOLLGATE_LOGIN_FAILURES=0`` (sign-in
throttling off, so every login really hashes its password: the flood stands for many distinct
users or attackers) and ``TOLLGATE_SECURE_COOKIES=false`` (plain http).

Then, for each variant of ``--lf-variants`` (default ``one,two,two-pinned``; the pinned one
only with ``taskset``), new servers on the same database:

* ``one``: one server, ``config.asgi:application`` (both planes on one port) with
  ``--lf-workers`` (2) workers; chat and logins go to the same port.
* ``two``: the data plane ``config.asgi:gateway_application`` with the same worker count on
  one port, the control plane ``config.asgi:control_application`` with
  ``--lf-control-workers`` (1) workers on another, under ``nice -n 10`` as the Procfile and
  compose.yaml start it; chat to the first, logins to the second.
* ``two-pinned``: as ``two``, with the data plane under ``taskset -c 0`` and the control plane
  under ``taskset -c 1``.

The clients and the stub are pinned in every variant (when ``taskset`` exists and there are 2
CPUs), so that only the servers' placement changes from one variant to the next: the stub
(the vendor) and the chat client (the API callers) on core 0, the login client (the
browsers) on core 1.  Redis and PostgreSQL are not pinned (shared services; the kernel
places them).  On this 2-core host they stand for other machines: left unpinned, a client
gets 1/N of the CPU among N runnable threads, and 60 hashing threads starve it, which
shows up as send lag rather than as the server's latency.

Servers: gunicorn with ``uvicorn_worker.UvicornWorker`` (``--lf-server gunicorn``, the
default) or ``uvicorn --workers`` (``--lf-server uvicorn``).  Each variant: a warm-up
(chat at the measured rate, a few logins), then ``--lf-phase-s`` (20) seconds of chat alone
(``solo``) and the same time with the login flood (``flood``).  Chat: ``--lf-chat-rps`` (50)
non-streamed OpenAI-shape requests per second, open loop (sent at fixed times however many
are outstanding), from its own process.  Flood: ``--lf-logins`` (60) concurrent clients in
another process, each looping until the phase ends: a fresh cookie jar, GET ``/login/``, POST
the form with its CSRF token, the user's name and a wrong password (``--lf-password right``:
the right one, answered by a 302 to the dashboard and a new session).  A login counts when
its POST was answered as expected (200 with the form's error, or the 302) within the phase.

Figures per variant and phase: chat requests/s (answered 200 with 8 completion tokens, over
the phase), p50/p95/p99/max latency (client side, from sending to the end of the body, of the
requests sent in the phase), errors, the chat client's send lag p99 (how late the open-loop
sender was: a starved client); logins answered in the phase, the rate of those started in it
(until the last was answered, maybe after the phase), their p50/p95 (GET + POST) and errors;
CPU (% of one core over the phase) of the data-plane server (the one-process server in
``one``: its hashing included), of the control plane, and the host's busy % (both cores,
everyone's processes: the host is shared).  Exit code 0 when every chat request and every
login succeeded as expected in every variant, 1 otherwise, 2 when setup failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import shutil
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

# run.py's and fairness.py's helpers (run.py imports this module; see fairness.py's note on
# the circular import: nothing here uses them at import time).
import fairness
import run as bench

LOGIN_USER = "bench-login"
LOGIN_PATH = "/login/"
CSRF_RE = re.compile(rb'name="csrfmiddlewaretoken" value="([^"]+)"')
WRONG_PASSWORD_MARK = b"Please enter a correct"  # Django's AuthenticationForm invalid_login
WARMUP_S = 8.0  # before the first measured phase: chat at the rate, WARM_LOGINS logins
WARM_LOGINS = 4
# The control plane runs at this niceness, as the Procfile and compose.yaml start it.
CONTROL_NICENESS = 10
BACKGROUND_S = 3.0  # the host's busy % measured this long before each variant (others' work)
CHAT_POOL = 512  # the chat client's connection pool (open loop: many outstanding under flood)
LOGIN_TIMEOUT_S = 60.0
VARIANTS = ("one", "two", "two-pinned")
GATEWAY_CORE, CONTROL_CORE = 0, 1  # pinning: the proxy side, the browser side
SERVER_ENV = {
    # Sign-in throttling off: every login hashes (the flood stands for many distinct clients).
    "TOLLGATE_LOGIN_FAILURES": "0",
    # Plain http: production cookies are Secure by default and an http client drops them.
    "TOLLGATE_SECURE_COOKIES": "false",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("login flood (--login-flood, bench/login_flood.py)")
    g.add_argument(
        "--login-flood",
        action="store_true",
        help="run the login-flood scenario (one process vs. two planes) instead",
    )
    g.add_argument("--lf-phase-s", type=float, default=20.0, help="seconds per phase (20)")
    g.add_argument(
        "--lf-chat-rps", type=float, default=50.0, help="chat requests/s, open loop (50)"
    )
    g.add_argument("--lf-logins", type=int, default=60, help="concurrent login clients (60)")
    g.add_argument(
        "--lf-workers", type=int, default=2, help="workers of the data plane / one server (2)"
    )
    g.add_argument(
        "--lf-control-workers", type=int, default=1, help="workers of the control plane (1)"
    )
    g.add_argument("--lf-server", choices=("gunicorn", "uvicorn"), default="gunicorn")
    g.add_argument(
        "--lf-password",
        choices=("wrong", "right"),
        default="wrong",
        help="the flood's password for the real user (wrong: 200 + form error; right: 302)",
    )
    g.add_argument(
        "--lf-variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, in order, of {', '.join(VARIANTS)} (default all)",
    )


def check_arguments(args: argparse.Namespace) -> str | None:
    variants = [v.strip() for v in args.lf_variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        return f"--lf-variants: unknown {unknown}; known: {', '.join(VARIANTS)}"
    if "two-pinned" in variants and not can_pin():
        return "two-pinned needs taskset and 2 CPUs"
    if min(args.lf_phase_s, args.lf_chat_rps) <= 0:
        return "--lf-phase-s and --lf-chat-rps must be positive"
    if min(args.lf_logins, args.lf_workers, args.lf_control_workers) < 1:
        return "--lf-logins, --lf-workers and --lf-control-workers must be positive"
    args.lf_variant_list = variants
    return None


# --------------------------------------------------------------------------- clients


async def chat_client(plan: dict[str, Any]) -> dict[str, Any]:
    """Warm up until plan["t0"], then chat open loop until plan["t_end"]; every sample."""
    url = plan["base"] + fairness.CHAT_PATH
    headers, body = fairness.chat_headers(plan["key"]), fairness.chat_body()
    timeout = aiohttp.ClientTimeout(total=bench.REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=CHAT_POOL, limit_per_host=CHAT_POOL)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        now = time.time()
        warm = await fairness.paced(
            session,
            url,
            headers,
            body,
            rate=plan["rate"],
            start=now,
            end=max(now, plan["t0"] - 0.5),
            classify=fairness.classify_victim,
        )
        samples = await fairness.paced(
            session,
            url,
            headers,
            body,
            rate=plan["rate"],
            start=plan["t0"],
            end=plan["t_end"],
            classify=fairness.classify_victim,
        )
    return {
        "warm_bad": dict(Counter(s.outcome[:160] for s in warm if s.outcome != "ok")),
        "samples": [(s.due, s.sent, s.latency, s.outcome[:160]) for s in samples],
    }


async def one_login(
    session: aiohttp.ClientSession,
    jar: aiohttp.CookieJar,
    base: str,
    password: str,
    right: bool,
) -> str:
    """GET the form, POST it with its CSRF token: "ok", or what went wrong."""
    jar.clear()  # a new visitor: a new CSRF cookie, no session
    try:
        async with session.get(base + LOGIN_PATH) as resp:
            page = await resp.read()
            if resp.status != 200:
                return f"GET HTTP {resp.status}"
        found = CSRF_RE.search(page)
        if not found:
            return "GET: no csrfmiddlewaretoken in the form"
        form = {
            "csrfmiddlewaretoken": found.group(1).decode(),
            "username": LOGIN_USER,
            "password": password,
            "next": "",
        }
        async with session.post(base + LOGIN_PATH, data=form, allow_redirects=False) as resp:
            answer = await resp.read()
            status, location = resp.status, resp.headers.get("location", "")
    except TimeoutError:
        return "timeout"
    except aiohttp.ClientError as exc:
        return type(exc).__name__
    if right:
        if status == 302 and LOGIN_PATH not in location:
            return "ok"
        return f"POST HTTP {status} (expected 302 to the dashboard) {location[:80]}"
    if status == 200 and WRONG_PASSWORD_MARK in answer:
        return "ok"
    return f"POST HTTP {status} (expected 200 with the form's error)"


async def login_client(plan: dict[str, Any]) -> dict[str, Any]:
    """WARM_LOGINS logins now, then plan["logins"] clients looping from plan["start"] until
    plan["end"]: (started, finished, outcome) per login."""
    base, password, right = plan["base"], plan["password"], plan["right"]
    timeout = aiohttp.ClientTimeout(total=LOGIN_TIMEOUT_S)
    results: list[tuple[float, float, str]] = []

    async def client(start: float, end: float, once: bool) -> None:
        jar = aiohttp.CookieJar(unsafe=True)  # unsafe: keep cookies of an IP-address host
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(
            connector=connector, cookie_jar=jar, timeout=timeout
        ) as session:
            await asyncio.sleep(max(0.0, start - time.time()))
            while time.time() < end:
                t0 = time.time()
                outcome = await one_login(session, jar, base, password, right)
                results.append((t0, time.time(), outcome))
                if once:
                    return

    now = time.time()
    await asyncio.gather(*(client(now, now + 60, True) for _ in range(WARM_LOGINS)))
    warm_bad = dict(Counter(o for _, _, o in results if o != "ok"))
    results.clear()
    await asyncio.gather(
        *(client(plan["start"], plan["end"], False) for _ in range(plan["logins"]))
    )
    return {"warm_bad": warm_bad, "logins": results}


def client_main(kind: str, plan_json: str) -> int:
    plan = json.loads(plan_json)
    run = chat_client if kind == "chat" else login_client
    out = bench.run_loop(lambda: run(plan))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


# --------------------------------------------------------------------------- servers


def server_argv(args: argparse.Namespace, app: str, workers: int, port: int) -> list[str]:
    if args.lf_server == "gunicorn":
        return [
            sys.executable, "-m", "gunicorn", app,
            "--worker-class", "uvicorn_worker.UvicornWorker",
            "--workers", str(workers), "--bind", f"127.0.0.1:{port}",
            "--log-level", "warning", "--graceful-timeout", "3", "--timeout", "120",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), "--loop", "uvloop", "--http", "httptools",
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip


def start_server(
    args: argparse.Namespace,
    name: str,
    app: str,
    workers: int,
    env: dict[str, str],
    tmp: Path,
    procs: list[bench.Proc],
    cpu: int | None,
    niceness: int = 0,
) -> tuple[bench.Proc, str, str]:
    """Start a server, wait for its /healthz; (process, base URL, command line shown)."""
    port = bench.free_port()
    argv = server_argv(args, app, workers, port)
    if niceness:
        argv = ["nice", "-n", str(niceness), *argv]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    proc = bench.Proc(name, argv, env, tmp)
    procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + bench.START_TIMEOUT_S
    while time.monotonic() < deadline:
        if bench.http_get(url + "/healthz") == 200:
            return proc, url, " ".join(argv).replace(sys.executable, "python")
        if not proc.alive():
            break
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not start; stderr:\n{proc.stderr_tail()}")


def can_pin() -> bool:
    return shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2


def pin_process(pid: int, cpu: int) -> None:
    """Pin every thread of a running process to one CPU."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def require_empty_database(database_url: str) -> None:
    """seed_demo is meant for a fresh database: refuse one that holds tables already."""
    import psycopg

    with psycopg.connect(database_url, connect_timeout=5) as conn:
        row = conn.execute("SELECT to_regclass('django_migrations')").fetchone()
    if row and row[0] is not None:
        raise RuntimeError(
            "--login-flood needs an empty database (it seeds its own tenant): drop and "
            "recreate it first, e.g. psql -c 'DROP DATABASE x' -c 'CREATE DATABASE x'"
        )


def seed(args: argparse.Namespace, env: dict[str, str], stub_url: str) -> tuple[str, str]:
    """run.py's setup without its gateway: the demo key, limits lifted; and the login user.
    Returns (virtual key, the user's password)."""
    bench.run_manage(["migrate", "--noinput"], env)
    seeded = None
    for line in bench.run_manage(["seed_demo", "--stub-url", stub_url], env).splitlines():
        if line.strip().startswith("{"):
            seeded = json.loads(line)
    if not seeded or "api_key" not in seeded or "group_id" not in seeded:
        raise RuntimeError("seed_demo printed no JSON line with api_key and group_id")
    password = secrets.token_urlsafe(18)
    bench.run_manage(
        [
            "shell",
            "-c",
            "from accounts.models import Group; "
            "from django.contrib.auth import get_user_model; "
            f"n = Group.objects.filter(pk={int(seeded['group_id'])}).update("
            "budget_max_micro=10**15, rpm_limit=10**9, tpm_limit=2**31 - 1, "
            "concurrency_limit=100000); "
            "assert n == 1, n; "
            f"u, _ = get_user_model().objects.get_or_create(username={LOGIN_USER!r}); "
            "u.is_active = True; "
            f"u.set_password({password!r}); "
            "u.save()",
        ],
        env,
    )
    return str(seeded["api_key"]), password


# --------------------------------------------------------------------------- one variant


@dataclass
class PhaseFigures:
    variant: str
    phase: str  # "solo" or "flood"
    seconds: float
    chat_sent: int = 0
    chat_ok: int = 0
    chat_errors: int = 0
    chat_error_kinds: dict[str, int] = field(default_factory=dict)
    chat_rps: float = 0.0
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    lag_p99_ms: float | None = None
    logins: int = 0  # answered within the phase
    logins_started: int = 0  # started in the phase, answered (maybe after it)
    last_login_s: float | None = None  # from the phase's start to the last of those answers
    logins_per_s: float = 0.0  # logins_started / last_login_s
    login_errors: int = 0
    login_error_kinds: dict[str, int] = field(default_factory=dict)
    login_p50_ms: float | None = None
    login_p95_ms: float | None = None
    data_cpu_pct: float | None = None
    control_cpu_pct: float | None = None
    host_busy_pct: float | None = None
    load_before: tuple[float, float, float] | None = None
    gateway_error_logs: int = 0


@dataclass
class VariantRun:
    name: str
    commands: list[str]
    load_before: tuple[float, float, float]
    background_busy_pct: float | None
    phases: list[PhaseFigures] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def run_variant(
    args: argparse.Namespace,
    variant: str,
    env: dict[str, str],
    tmp: Path,
    key: str,
    password: str,
) -> VariantRun:
    procs: list[bench.Proc] = []
    load = os.getloadavg()
    h0 = fairness.host_ticks()
    time.sleep(BACKGROUND_S)
    h1 = fairness.host_ticks()
    background = 100 * (h1[0] - h0[0]) / (h1[1] - h0[1]) if h0 and h1 and h1[1] > h0[1] else None
    print(
        f"\n== {variant}: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; host busy "
        f"{bench.fmt(background, 0)}% over {BACKGROUND_S:g} s before starting (others' work)",
        flush=True,
    )
    pinned = variant == "two-pinned"
    try:
        if variant == "one":
            data, data_url, cmd = start_server(
                args, "one", "config.asgi:application", args.lf_workers, env, tmp, procs, None
            )
            control, control_url, commands = None, data_url, [cmd]
        else:
            data, data_url, cmd1 = start_server(
                args,
                f"{variant}-data",
                "config.asgi:gateway_application",
                args.lf_workers,
                env,
                tmp,
                procs,
                GATEWAY_CORE if pinned else None,
            )
            control, control_url, cmd2 = start_server(
                args,
                f"{variant}-control",
                "config.asgi:control_application",
                args.lf_control_workers,
                env,
                tmp,
                procs,
                CONTROL_CORE if pinned else None,
                niceness=CONTROL_NICENESS,
            )
            commands = [cmd1, cmd2]
        for c in commands:
            print(f"  {c}", flush=True)
        run = VariantRun(variant, commands, load, background)
        p = args.lf_phase_s
        t0 = time.time() + WARMUP_S
        bounds = [("solo", t0, t0 + p), ("flood", t0 + p, t0 + 2 * p)]
        chat_plan = {
            "base": data_url,
            "key": key,
            "rate": args.lf_chat_rps,
            "t0": t0,
            "t_end": t0 + 2 * p,
        }
        login_plan = {
            "base": control_url,
            "password": password if args.lf_password == "right" else password + "-wrong",
            "right": args.lf_password == "right",
            "logins": args.lf_logins,
            "start": t0 + p,
            "end": t0 + 2 * p,
        }
        me = [sys.executable, str(Path(__file__).resolve())]
        chat_argv = [*me, "--chat-client", json.dumps(chat_plan)]
        login_argv = [*me, "--login-client", json.dumps(login_plan)]
        if can_pin():
            chat_argv = ["taskset", "-c", str(GATEWAY_CORE), *chat_argv]
            login_argv = ["taskset", "-c", str(CONTROL_CORE), *login_argv]
        chat = bench.Proc(f"{variant}-chat", chat_argv, dict(os.environ), tmp)
        procs.append(chat)
        flood = bench.Proc(f"{variant}-logins", login_argv, dict(os.environ), tmp)
        procs.append(flood)
        servers = [data] + ([control] if control else [])
        offsets = [s.stderr_size() for s in servers]
        cpu_marks = []
        for t in (t0, t0 + p, t0 + 2 * p):
            time.sleep(max(0.0, t - time.time()))
            cpu_marks.append(
                (
                    bench.cpu_ms(data.pid),
                    bench.cpu_ms(control.pid) if control else None,
                    fairness.host_ticks(),
                )
            )
            if t == t0 + p:
                print(f"  solo phase over; flood from {time.strftime('%H:%M:%S')}", flush=True)
        chat_out = fairness.wait_flooder(chat, time.time() + bench.REQUEST_TIMEOUT_S + 15)
        login_out = fairness.wait_flooder(flood, time.time() + LOGIN_TIMEOUT_S + 15)
        if chat_out["warm_bad"]:
            run.problems.append(f"{variant}: chat warm-up failures {chat_out['warm_bad']}")
        if login_out["warm_bad"]:
            run.problems.append(f"{variant}: login warm-up failures {login_out['warm_bad']}")
        error_logs = sum(
            1
            for s, off in zip(servers, offsets, strict=True)
            for line in s.stderr_since(off).splitlines()
            if s.is_error_line(line)
        )
        for i, (phase, start, end) in enumerate(bounds):
            fig = PhaseFigures(variant, phase, end - start, load_before=load)
            chat_figures(fig, [s for s in chat_out["samples"] if start <= s[0] < end])
            login_figures(fig, start, end, login_out["logins"])
            (d0, c0, h0), (d1, c1, h1) = cpu_marks[i], cpu_marks[i + 1]
            fig.data_cpu_pct = 100 * (d1 - d0) / 1000 / fig.seconds
            if c0 is not None and c1 is not None:
                fig.control_cpu_pct = 100 * (c1 - c0) / 1000 / fig.seconds
            if h0 and h1 and h1[1] > h0[1]:
                fig.host_busy_pct = 100 * (h1[0] - h0[0]) / (h1[1] - h0[1])
            fig.gateway_error_logs = error_logs if phase == "flood" else 0
            run.phases.append(fig)
            if fig.chat_errors:
                run.problems.append(f"{variant} {phase}: chat errors {fig.chat_error_kinds}")
            if fig.login_errors:
                run.problems.append(f"{variant} {phase}: login errors {fig.login_error_kinds}")
            print(
                f"  {phase}: chat {fig.chat_ok}/{fig.chat_sent} ok, p50 {bench.fmt(fig.p50_ms)}"
                f" p95 {bench.fmt(fig.p95_ms)} p99 {bench.fmt(fig.p99_ms)}"
                f" max {bench.fmt(fig.max_ms)} ms, lag99 {bench.fmt(fig.lag_p99_ms)} ms;"
                f" {fig.logins} logins in the phase ({fig.logins_per_s:.2f}/s)",
                flush=True,
            )
        if error_logs:
            run.problems.append(f"{variant}: {error_logs} ERROR lines in the servers' logs")
        for s in servers:
            if not s.alive():
                run.problems.append(f"{variant}: {s.name} exited ({s.popen.poll()})")
        return run
    finally:
        for proc in reversed(procs):
            proc.stop()


def chat_figures(fig: PhaseFigures, samples: list[list[Any]]) -> None:
    fig.chat_sent = len(samples)
    ok = [lat for _, _, lat, outcome in samples if outcome == "ok"]
    bad = Counter(outcome for _, _, _, outcome in samples if outcome != "ok")
    fig.chat_ok, fig.chat_errors, fig.chat_error_kinds = len(ok), sum(bad.values()), dict(bad)
    fig.chat_rps = len(ok) / fig.seconds
    fig.p50_ms = fairness.quantile_ms(ok, 0.50)
    fig.p95_ms = fairness.quantile_ms(ok, 0.95)
    fig.p99_ms = fairness.quantile_ms(ok, 0.99)
    fig.max_ms = bench.ms(max(ok, default=None))
    fig.lag_p99_ms = fairness.quantile_ms([sent - due for due, sent, _, _ in samples], 0.99)


def login_figures(fig: PhaseFigures, t0: float, t1: float, logins: list[list[Any]]) -> None:
    """Logins answered within the phase; and the rate of all those started in it, over the
    time from the phase's start to the last answer (60 hashes shared by the CPU end late)."""
    done = [x for x in logins if t0 <= x[1] < t1]
    ok = [end - start for start, end, outcome in done if outcome == "ok"]
    bad = Counter(outcome for _, _, outcome in done if outcome != "ok")
    fig.logins, fig.login_errors, fig.login_error_kinds = len(ok), sum(bad.values()), dict(bad)
    started = [x for x in logins if t0 <= x[0] < t1 and x[2] == "ok"]
    fig.logins_started = len(started)
    if started:
        fig.last_login_s = max(end for _, end, _ in started) - t0
        fig.logins_per_s = len(started) / fig.last_login_s
    fig.login_p50_ms = fairness.quantile_ms(ok, 0.50)
    fig.login_p95_ms = fairness.quantile_ms(ok, 0.95)


# --------------------------------------------------------------------------- report


def report(args: argparse.Namespace, runs: list[VariantRun]) -> str:
    f = bench.fmt
    rows = [
        [
            f"{ph.variant} {ph.phase}",
            f"{ph.chat_ok}/{ph.chat_sent}",
            f(ph.chat_rps, 1),
            f(ph.p50_ms),
            f(ph.p95_ms),
            f(ph.p99_ms),
            f(ph.max_ms),
            str(ph.chat_errors),
            f(ph.lag_p99_ms),
            str(ph.logins),
            f"{ph.logins_started}/{f(ph.last_login_s, 1)}",
            f(ph.logins_per_s, 2),
            f(ph.login_p50_ms, 0),
            f(ph.login_p95_ms, 0),
            str(ph.login_errors),
            f(ph.data_cpu_pct, 0),
            f(ph.control_cpu_pct, 0),
            f(ph.host_busy_pct, 0),
        ]
        for r in runs
        for ph in r.phases
    ]
    table = bench.render_table(
        rows,
        [
            "variant phase", "chat ok", "req/s", "p50 ms", "p95 ms", "p99 ms", "max ms",
            "err", "lag99", "logins", "all/s", "login/s", "lgn p50", "lgn p95", "lgn err",
            "data %", "ctl %", "host %",
        ],
    )  # fmt: skip
    head = (
        f"chat: {args.lf_chat_rps:g} req/s open loop (OpenAI shape, not streamed); flood: "
        f"{args.lf_logins} concurrent clients, GET {LOGIN_PATH} + POST with CSRF, "
        f"{args.lf_password} password for a real user (PBKDF2); phases of {args.lf_phase_s:g} s;"
        f" {os.cpu_count()} CPUs; server: {args.lf_server}"
    )
    pins = (
        f"stub and chat client pinned to CPU {GATEWAY_CORE}, login client to CPU {CONTROL_CORE}"
        if can_pin()
        else "clients and stub not pinned"
    )
    cmds = "\n".join(
        f"{r.name} (before it: load average {r.load_before[0]:.2f}, host busy "
        f"{bench.fmt(r.background_busy_pct, 0)}%): " + " | ".join(r.commands)
        for r in runs
    )
    notes = (
        "req/s: chat answered 200 (8 tokens) per second of the phase; p50..max: client-side "
        "latency of the phase's chat requests; lag99: the chat client's send lag p99 (ms); "
        "logins: POSTs answered as expected within the phase; all/s: the logins started in the "
        "phase / seconds from its start until the last of them was answered (after the phase "
        "when the flood's last hashes finish late); login/s: their rate; lgn p50/p95: GET + "
        "POST of those answered in the phase (ms); "
        "data %: CPU of the data-plane server (in `one`, the one server: hashing included), "
        "ctl %: the control plane's, host %: both cores busy, everyone's processes (% of all "
        "cores); CPU in % of one core."
    )
    return "\n\n".join([head + "; " + pins, cmds, table, notes])


# --------------------------------------------------------------------------- main


def main(args: argparse.Namespace) -> int:
    problem = check_arguments(args)
    if problem:
        print(f"setup failed: {problem}", file=sys.stderr)
        return 2
    if not args.database_url:
        print("setup failed: --login-flood needs --database-url (production mode)", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-login-flood-"))
    procs: list[bench.Proc] = []
    runs: list[VariantRun] = []
    status = 0
    try:
        try:
            if args.redis_url:
                print(f"cleared {fairness.clear_redis(args.redis_url)} tollgate:* keys in Redis")
            env = bench.child_env(str(tmp / "var"), args.database_url, args.redis_url)
            env.update(SERVER_ENV)
            assert all(k in bench.ALLOWED_PREFIXED for k in SERVER_ENV), "run.py ALLOWED_PREFIXED"
            require_empty_database(args.database_url)
            stub, stub_url = bench.start_stub(env, tmp)
            procs.append(stub)
            if can_pin():
                pin_process(stub.pid, GATEWAY_CORE)
            key, password = seed(args, env, stub_url)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
            return bench.setup_failed(exc, procs)
        print(
            f"stub {stub_url} (pid {stub.pid}); {os.cpu_count()} CPUs; variants "
            f"{', '.join(args.lf_variant_list)}; "
            + (
                f"stub and chat client pinned to CPU {GATEWAY_CORE}, login client to CPU "
                f"{CONTROL_CORE}"
                if can_pin()
                else "nothing pinned (no taskset or one CPU)"
            ),
            flush=True,
        )
        for variant in args.lf_variant_list:
            try:
                runs.append(run_variant(args, variant, env, tmp, key, password))
            except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
                print(f"{variant} failed: {exc}", file=sys.stderr)
                status = 1
        problems = [p for r in runs for p in r.problems]
        print()
        if runs:
            print(report(args, runs))
        if problems:
            print("\nPROBLEMS:\n  " + "\n  ".join(problems))
            status = 1
        if args.json:
            doc = {
                "scenario": "login-flood",
                "args": {k: getattr(args, k) for k in vars(args) if k.startswith("lf_")},
                "host": {"cpus": os.cpu_count()},
                "runs": [asdict(r) for r in runs],
                "ok": status == 0,
            }
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
            print(f"\nwrote {args.json}")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    finally:
        bench.stop_all(procs, tmp, keep=args.keep)
    return status


if __name__ == "__main__":
    if sys.argv[1:2] in (["--chat-client"], ["--login-client"]):
        sys.exit(client_main("chat" if sys.argv[1] == "--chat-client" else "login", sys.argv[2]))
    sys.exit("run this through run.py: python bench/run.py --login-flood ...")
