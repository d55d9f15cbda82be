"""Processes a test starts: the stub vendor, gateways (uvicorn), a private redis-server."""

from __future__ import annotations

import os
import re
import runpy
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from tests.support.waits import wait_until

ROOT = Path(__file__).resolve().parent.parent.parent
# Production's idle keep-alive (gunicorn.conf.py), given to the plain uvicorn started here.
KEEP_ALIVE_S = runpy.run_path(str(ROOT / "gunicorn.conf.py"))["keepalive"]
INTERNAL_TOKEN = "internal-token-for-tests-0123456789abcdef"
WEB_TOKEN = "web-internal-token-for-tests-0123456789"  # WEB_FETCH_INTERNAL_TOKEN


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child process: ours, minus Tollgate variables, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOLLGATE_", "GATEWAY_", "WEB_FETCH_", "DATABASE_URL", "REDIS_URL"))
    }
    # Production-mode children need a caller key: the test process's (or "off").
    env["TOLLGATE_CALLER_KEY"] = settings.TOLLGATE["CALLER_KEY"] or "off"
    # ...and the receipt signing keys: the test process's, so its checks verify theirs.
    env["TOLLGATE_RECEIPT_KEYS"] = settings.RECEIPT_KEYS
    # Production-mode children serve plain http on 127.0.0.1 (no TLS proxy in front) and use
    # the machine's Redis, which keeps nothing on disk: both said explicitly, as an operator
    # would have to.
    env["TOLLGATE_SECURE_COOKIES"] = "false"
    env["TOLLGATE_REDIS_PERSISTENCE"] = "none"
    env.update(extra)
    return env


def child_database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def run_manage(command: str, *, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    """Run a documented `python manage.py ...` command as a process, on the test database
    (`cwd`: where its file arguments are)."""
    argv = [sys.executable, str(ROOT / "manage.py"), *command.split()[2:]]
    return subprocess.run(
        argv,
        cwd=cwd,
        env=child_env(
            DATABASE_URL=child_database_url(),
            SECRET_KEY=settings.SECRET_KEY,
            SEALING_KEYS=settings.SEALING_KEYS,
            **env,
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )


# ---------------------------------------------------------------- the stub vendor


@dataclass
class Stub:
    url: str
    proc: subprocess.Popen

    def calls(self) -> list[dict]:
        return httpx.get(f"{self.url}/_stub/calls").json()["calls"]

    def vendor_calls(self) -> list[dict]:
        return [c for c in self.calls() if c["model"] is not None]

    def faults(self, *faults: dict) -> None:
        response = httpx.post(f"{self.url}/_stub/faults", json={"faults": list(faults)})
        response.raise_for_status()

    def clear(self) -> None:
        httpx.delete(f"{self.url}/_stub/calls").raise_for_status()


def start_stub() -> Stub:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stubvendor.server", "--host", "127.0.0.1", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(),
    )
    assert proc.stdout is not None  # stdout=PIPE
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"stub did not start: {line!r}")
    return Stub(url=match.group(1), proc=proc)


# ---------------------------------------------------------------- gateway processes


@dataclass
class Gateway:
    url: str
    proc: subprocess.Popen
    log_path: Path
    env: dict = field(repr=False, default_factory=dict)

    def reload(self) -> None:
        response = httpx.post(
            f"{self.url}/internal/reload", headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"}
        )
        assert response.status_code == 200, response.text

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_gateway(
    tmp_dir: Path, *, workers: int = 1, app: str = "config.asgi:application", **env: str
) -> Gateway:
    """Start a real gateway process (uvicorn, as in production) on a free port.

    With `workers` above 1 it is `uvicorn --workers N`: one server, N worker processes.
    `app`: config.asgi's `gateway_application` or `control_application` for one plane alone.
    """
    port = free_port()
    log_path = tmp_dir / f"gateway-{port}.log"
    full_env = child_env(
        DATABASE_URL=child_database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        SEALING_KEYS=settings.SEALING_KEYS,
        GATEWAY_INTERNAL_TOKEN=INTERNAL_TOKEN,
        WEB_FETCH_INTERNAL_TOKEN=WEB_TOKEN,
        TOLLGATE_VAR_DIR=str(tmp_dir),
        TOLLGATE_LOG_LEVEL="INFO",
        TOLLGATE_BREAKER_COOLDOWN_S="2",
        **({"REDIS_URL": settings.REDIS_URL} if settings.REDIS_URL else {}),
    )
    full_env.update(env)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                app,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--loop",
                "uvloop",
                "--http",
                "httptools",
                "--no-access-log",
                "--timeout-keep-alive",
                str(KEEP_ALIVE_S),
                *(["--workers", str(workers)] if workers > 1 else []),
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
    gateway = Gateway(url=f"http://127.0.0.1:{port}", proc=proc, log_path=log_path, env=full_env)
    wait_healthy(proc, gateway.url, "gateway", lambda: gateway.log()[-3000:], timeout_s=30)
    return gateway


def wait_healthy(
    proc: subprocess.Popen, url: str, what: str, log: Callable[[], str], *, timeout_s: float
) -> None:
    """Wait until `url`/healthz answers 200; fail the test, with `log()`, if `proc` exits."""

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log()}")
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout_s=timeout_s, what=f"{what} /healthz")


# ---------------------------------------------------------------- Celery workers


@dataclass
class Worker:
    """A real Celery worker process (`celery -A config worker`), as in production."""

    name: str
    proc: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_worker(tmp_dir: Path, name: str, *args: str, **env: str) -> Worker:
    """Start `celery -A config worker --pool solo` (plus `args`) on the test database and the
    Redis broker, with `env` over the test settings."""
    log_path = tmp_dir / f"worker-{name}.log"
    full_env = child_env(
        DATABASE_URL=child_database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        SEALING_KEYS=settings.SEALING_KEYS,
        TOLLGATE_VAR_DIR=str(tmp_dir),
        TOLLGATE_LOG_LEVEL="INFO",
        **({"REDIS_URL": settings.REDIS_URL} if settings.REDIS_URL else {}),
    )
    full_env.update(env)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--pool",
                "solo",
                "-n",
                f"{name}@%h",
                "--loglevel",
                "INFO",
                *args,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
    return Worker(name=name, proc=proc, log_path=log_path)


# ---------------------------------------------------------------- a redis-server of its own


@dataclass
class RedisServer:
    """A redis-server of a test's own, to stop, pause and restart on the same port."""

    port: int
    proc: subprocess.Popen | None = None
    # With a folder: an append-only file there, as production runs Redis (docs/production.md).
    aof_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                *(
                    ["--appendonly", "yes", "--dir", str(self.aof_dir)]
                    if self.aof_dir
                    else ["--appendonly", "no"]
                ),
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def pong() -> bool:
            try:
                return redis.Redis(port=self.port, socket_timeout=0.5).ping()
            except redis.RedisError:
                return False

        wait_until(pong, timeout_s=10, what=f"redis-server on {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None, "stopped"
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None, "stopped"
        self.proc.send_signal(signal.SIGCONT)


def manage_check(tmp_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """Run `manage.py check` with `env` set (settings are judged at start), in `tmp_dir`."""
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=child_env(TOLLGATE_VAR_DIR=str(tmp_dir), **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
