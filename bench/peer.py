"""``--peer litellm``: the gw-* loads sent to LiteLLM's proxy on the same stub (``peer-*`` rows).

Used by ``bench/run.py`` only when ``--peer`` is given (``make bench-peer``); nothing here is
imported or installed otherwise, and LiteLLM never enters ``requirements.txt``.

1. Install: ``bench/peer-requirements.txt`` (a pinned ``litellm[proxy]`` and its servers) goes
   into its own virtualenv, ``var/peer-venv`` (gitignored), created with the benchmark's
   Python.  The venv is reused while it holds a copy of that file's current text
   (``.bench-requirements``); otherwise pip runs again (its log: ``pip.log`` in the temp dir).
2. Config: ``litellm.json`` in the temp dir (JSON is YAML): ``gpt-4o-mini`` ->
   ``openai/gpt-4o-mini`` at ``<stub>/v1`` and ``claude-3-5-haiku`` ->
   ``anthropic/claude-3-5-haiku`` at ``<stub>`` (LiteLLM's proxy serves ``/v1/messages``),
   both with a fake upstream key, and a fresh random ``master_key``: the one key peer-*
   requests carry, as ``Authorization: Bearer`` / ``x-api-key`` like gw-* requests.
3. Start: ``litellm --config ... --host 127.0.0.1 --port <free> --num_workers W`` plus
   ``--run_granian`` (default; ``--peer-server uvicorn`` for LiteLLM's default server), with
   ``LITELLM_LOG=WARNING`` (uvicorn's access log off, as the gateway's), the bundled model
   cost map, and no database, Redis or provider credentials in its environment.  Ready when
   ``/health/liveliness`` answers, one completion goes through, and the process tree's CPU
   has settled (every worker done importing), so no start-up CPU lands in a measured phase.
4. Measure: exactly like gw-* (``run.run_scenario``): same bodies, n, c, warm-up and checks;
   ``cpu/req`` is the ``litellm`` process and its descendants (the server's workers); the
   ERROR column counts its ``:ERROR:`` / ``:CRITICAL:`` log lines and Python tracebacks.

What the peer does per request here, against Tollgate's full path: LiteLLM's master-key auth
(a constant-time compare; virtual keys, per-key budgets and rate limits need its Postgres
database through Prisma, which downloads its engines at run time, so they are off), routing,
the upstream call, translation back, and its cost calculation and logging callbacks; spend is
computed but written nowhere (no database), and nothing uses Redis.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import run  # bench/run.py; run.start_peer registers itself under this name first
from run import (
    ANTHROPIC_MODEL,
    OPENAI_MODEL,
    PROMPT,
    ROOT,
    Proc,
    Servers,
    cpu_ms,
    descendants,
    free_port,
    http_get,
)

VENV = ROOT / "var" / "peer-venv"
REQUIREMENTS = Path(__file__).resolve().parent / "peer-requirements.txt"
INSTALL_TIMEOUT_S = 1200.0
PEER_START_TIMEOUT_S = 180.0  # LiteLLM imports for seconds per worker on a busy 2-core box
SETTLE_CPU_MS_PER_S = 50.0  # "settled": the proxy tree used under 5 % of a core for 1 s
UPSTREAM_KEY = "sk-bench-peer-upstream"
DROP_ENV_PREFIXES = (
    "TOLLGATE_", "GATEWAY_", "LITELLM_", "OPENAI_", "ANTHROPIC_", "AZURE_", "AWS_", "GOOGLE_",
    "REDIS_", "DATABASE_", "POSTGRES", "PG",
)  # fmt: skip
DROP_ENV = ("DATABASE_URL", "DIRECT_URL", "REDIS_URL", "SECRET_KEY", "SEALING_KEYS", "VIRTUAL_ENV")


class PeerProc(Proc):
    """The peer proxy: stdout merged into stderr, LiteLLM's and Granian's error formats."""

    def is_error_line(self, line: str) -> bool:
        return any(m in line for m in (":ERROR:", ":CRITICAL:", "[ERROR]", "[CRITICAL]")) or (
            line.startswith("Traceback ")
        )

    def stop(self) -> None:
        left = descendants(self.pid)
        super().stop()
        for pid in left:  # a worker its server did not take down with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def venv_python() -> Path:
    return VENV / "bin" / "python"


def install(logdir: Path) -> None:
    """Create/reuse var/peer-venv and install bench/peer-requirements.txt into it."""
    wanted = REQUIREMENTS.read_text()
    marker = VENV / ".bench-requirements"
    if venv_python().exists() and marker.exists() and marker.read_text() == wanted:
        return
    print(f"installing {REQUIREMENTS.name} into {VENV.relative_to(ROOT)} ...", flush=True)
    log = logdir / "pip.log"
    with log.open("ab") as fh:
        steps = [
            [sys.executable, "-m", "venv", str(VENV)],
            [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", "-q",
             "-r", str(REQUIREMENTS)],
        ]  # fmt: skip
        if venv_python().exists():
            steps = steps[1:]
        for argv in steps:
            done = subprocess.run(
                argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"`{' '.join(argv[-4:])}` failed ({done.returncode}):\n{run.tail(log, 20)}"
                )
    marker.write_text(wanted)


def versions() -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        "for name in ('litellm', 'granian', 'uvicorn', 'uvloop'):\n"
        "    try:\n"
        "        out[name] = m.version(name)\n"
        "    except m.PackageNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(venv_python()), "-c", code], capture_output=True, text=True, timeout=60
    )
    return json.loads(done.stdout) if done.returncode == 0 else {}


def write_config(path: Path, stub_url: str, master_key: str) -> None:
    config = {
        "model_list": [
            {
                "model_name": OPENAI_MODEL,
                "litellm_params": {
                    "model": f"openai/{OPENAI_MODEL}",
                    "api_base": stub_url + "/v1",
                    "api_key": UPSTREAM_KEY,
                },
            },
            {
                "model_name": ANTHROPIC_MODEL,
                "litellm_params": {
                    "model": f"anthropic/{ANTHROPIC_MODEL}",
                    "api_base": stub_url,
                    "api_key": UPSTREAM_KEY,
                },
            },
        ],
        "general_settings": {"master_key": master_key},
    }
    path.write_text(json.dumps(config, indent=2) + "\n")


def peer_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(DROP_ENV_PREFIXES) and k not in DROP_ENV
    }
    env.update(
        PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
        LITELLM_MODE="PRODUCTION",  # no .env loading from the working directory
        LITELLM_LOG="WARNING",
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # the bundled cost map, no fetch at start
        HF_HUB_OFFLINE="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    return env


def post_json(url: str, key: str, body: Mapping[str, object], timeout: float = 30.0) -> int:
    req = urllib.request.Request(  # noqa: S310 - local URL
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - local URL
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def wait_ready(proc: PeerProc, url: str, key: str) -> float:
    """Block until the peer serves a completion and its CPU settles; its idle CPU ms/s."""
    deadline = time.monotonic() + PEER_START_TIMEOUT_S

    def check() -> None:
        if not proc.alive():
            raise RuntimeError(
                f"{proc.name} exited ({proc.popen.poll()}); output:\n{proc.stderr_tail(40)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{proc.name} not ready in {PEER_START_TIMEOUT_S:.0f}s; output:\n"
                f"{proc.stderr_tail(40)}"
            )

    while http_get(url + "/health/liveliness") != 200:
        check()
        time.sleep(0.2)
    body = {"model": OPENAI_MODEL, "messages": [{"role": "user", "content": PROMPT}]}
    while (status := post_json(url + "/v1/chat/completions", key, body)) != 200:
        check()
        print(f"  {proc.name}: first completion answered {status}, retrying", flush=True)
        time.sleep(1.0)
    while True:
        c0 = cpu_ms(proc.pid)
        time.sleep(1.0)
        used = cpu_ms(proc.pid) - c0
        if used < SETTLE_CPU_MS_PER_S:
            return used
        check()


def start(args: argparse.Namespace, servers: Servers, tmp: Path, procs: list[Proc]) -> Servers:
    """Install, configure and start the peer; a Servers whose gateway is the peer."""
    if args.peer != "litellm":
        raise RuntimeError(f"unknown peer {args.peer!r}")
    install(tmp)
    got = versions()
    if "litellm" not in got:
        raise RuntimeError(f"no litellm in {VENV}")
    master_key = "sk-bench-peer-" + secrets.token_urlsafe(24)
    config = tmp / "litellm.json"
    write_config(config, servers.stub_url, master_key)
    port = free_port()
    argv = [
        str(VENV / "bin" / "litellm"), "--config", str(config),
        "--host", "127.0.0.1", "--port", str(port), "--num_workers", str(args.peer_workers),
    ]  # fmt: skip
    if args.peer_server == "granian":
        argv.append("--run_granian")
    proc = PeerProc("litellm", argv, peer_env(), tmp, merge_stdout=True)
    procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    idle = wait_ready(proc, url, master_key)
    kids = descendants(proc.pid)
    args.peer_info = {
        "name": "litellm",
        "versions": got,
        "server": args.peer_server,
        "workers": args.peer_workers,
        "auth": "master key",
        "database": None,
        "redis": None,
    }
    print(
        f"peer LiteLLM {got.get('litellm')} proxy {url} (pid {proc.pid}, descendants {kids}), "
        f"{args.peer_server} {got.get(args.peer_server, '?')} x {args.peer_workers} worker(s), "
        f"master-key auth, no database (spend computed, not stored), no Redis; ready in "
        f"{time.monotonic() - t0:.1f}s, idle {idle:.0f} ms CPU/s",
        flush=True,
    )
    return dataclasses.replace(servers, gateway=proc, gw_url=url, api_key=master_key)
