"""The test harness: real PostgreSQL / Redis when configured, real processes, a real stub.

- The database is pytest-django's test database (PostgreSQL when DATABASE_URL points at
  one, else an SQLite file). Tests that drive processes use `transactional_db`, so what
  they create is committed and visible to the gateway processes they start.
- Redis is used when REDIS_URL is set; tests that need it are skipped otherwise, and the
  skip reason names what is missing. With TEST_REQUIRE_SERVICES=1 (CI) a missing service
  fails the run instead.
- The only fake is the upstream vendor: the stub, started as its own process.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
INTERNAL_TOKEN = "internal-token-for-tests-0123456789abcdef"
PLATFORM_KEY = "sk-platform-test-key-9f8e"
HAS_REDIS = bool(settings.REDIS_URL)
IS_POSTGRES = not settings.EMBEDDED and "postgresql" in settings.DATABASES["default"]["ENGINE"]

requires_redis = pytest.mark.skipif(not HAS_REDIS, reason="needs Redis: set REDIS_URL")
requires_postgres = pytest.mark.skipif(not IS_POSTGRES, reason="needs PostgreSQL: set DATABASE_URL")


def _retry_flush_on_deadlock() -> None:
    """Let a test's final flush retry: gateway processes may still be writing when it runs."""
    from django.core.management.base import CommandError
    from django.db import OperationalError
    from django.test import TransactionTestCase

    original = TransactionTestCase._fixture_teardown

    def teardown(self):
        for attempt in range(6):
            try:
                return original(self)
            except CommandError as exc:  # "couldn't be flushed", caused by a deadlock
                if attempt == 5 or not isinstance(exc.__cause__, OperationalError):
                    raise
                time.sleep(0.2)

    TransactionTestCase._fixture_teardown = teardown


_retry_flush_on_deadlock()


def pytest_sessionstart(session):
    if os.environ.get("TEST_REQUIRE_SERVICES") == "1" and not (HAS_REDIS and IS_POSTGRES):
        pytest.exit("TEST_REQUIRE_SERVICES=1 but DATABASE_URL / REDIS_URL are not both set", 2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, *, timeout_s: float = 15.0, interval_s: float = 0.05, what: str = ""):
    """Poll `check` until it returns a truthy value; fail the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or check}")
        time.sleep(interval_s)


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child process: ours, minus Tollgate variables, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOLLGATE_", "GATEWAY_", "DATABASE_URL", "REDIS_URL"))
    }
    # Production-mode children need a caller key: the test process's (or "off").
    env["TOLLGATE_CALLER_KEY"] = settings.TOLLGATE["CALLER_KEY"] or "off"
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
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"stub did not start: {line!r}")
    return Stub(url=match.group(1), proc=proc)


@pytest.fixture(scope="session")
def stub():
    server = start_stub()
    yield server
    server.proc.terminate()
    server.proc.wait(10)


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


def start_gateway(tmp_dir: Path, *, workers: int = 1, **env: str) -> Gateway:
    """Start a real gateway process (uvicorn, as in production) on a free port.

    With `workers` above 1 it is `uvicorn --workers N`: one server, N worker processes.
    """
    port = free_port()
    log_path = tmp_dir / f"gateway-{port}.log"
    full_env = child_env(
        DATABASE_URL=child_database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        SEALING_KEYS=settings.SEALING_KEYS,
        GATEWAY_INTERNAL_TOKEN=INTERNAL_TOKEN,
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
                "config.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--loop",
                "uvloop",
                "--http",
                "httptools",
                "--no-access-log",
                *(["--workers", str(workers)] if workers > 1 else []),
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
    gateway = Gateway(url=f"http://127.0.0.1:{port}", proc=proc, log_path=log_path, env=full_env)

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"gateway exited with {proc.returncode}:\n{gateway.log()[-3000:]}")
        try:
            return httpx.get(f"{gateway.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout_s=30, what="gateway /healthz")
    return gateway


@pytest.fixture(scope="session")
def gateway_factory(tmp_path_factory, django_db_setup, django_db_blocker):
    started: list[Gateway] = []

    def factory(**env: str) -> Gateway:
        tmp = tmp_path_factory.mktemp("gw")
        gateway = start_gateway(tmp, **env)
        started.append(gateway)
        return gateway

    yield factory
    for gateway in started:
        gateway.stop()


@pytest.fixture
def spawn_gateway(gateway_factory):
    """Start gateways for one test; they are stopped when it ends (connections are finite)."""
    started: list[Gateway] = []

    def spawn(**env: str) -> Gateway:
        gateway = gateway_factory(**env)
        started.append(gateway)
        return gateway

    yield spawn
    for gateway in started:
        gateway.stop()


@pytest.fixture(scope="session")
def shared_gateway(gateway_factory):
    return gateway_factory()


def clear_shared_state() -> None:
    if not HAS_REDIS:
        return
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    for pattern in ("tollgate:cb:*", "tollgate:rl:*", "tollgate:bench:*"):
        keys = list(client.scan_iter(pattern, count=1000))
        if keys:
            client.delete(*keys)
    client.close()


# ---------------------------------------------------------------- tenants and profiles


@dataclass
class Tenant:
    account_id: int
    group_id: int
    api_key: str
    api_key_id: int
    api_token: str


def make_tenant(
    *, wallet_micro: int = 100_000_000, invoiced: bool = False, budget_micro: int | None = None
) -> Tenant:
    from billing.services import tenant_provision

    tenant = tenant_provision(
        name=f"t-{uuid.uuid4().hex[:10]}",
        wallet_micro=wallet_micro,
        invoiced=invoiced,
        budget_max_micro=budget_micro,
    )
    return Tenant(
        account_id=tenant.account.pk,
        group_id=tenant.group.pk,
        api_key=tenant.api_key_secret,
        api_key_id=tenant.api_key.pk,
        api_token=tenant.api_token_secret,
    )


def stub_profiles(stub_url: str) -> list[dict]:
    return [
        {
            "name": "stub-openai",
            "kind": "openai",
            "base_url": f"{stub_url}/v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {
                    "name": "gpt-4o-mini",
                    "input_micro_per_mtok": 150_000,
                    "output_micro_per_mtok": 600_000,
                },
                {
                    "name": "gpt-4o",
                    "input_micro_per_mtok": 2_500_000,
                    "output_micro_per_mtok": 10_000_000,
                },
            ],
        },
        {
            "name": "stub-anthropic",
            "kind": "anthropic",
            "base_url": stub_url,
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {
                    "name": "claude-3-5-haiku",
                    "upstream": "claude-3-5-haiku-latest",
                    "input_micro_per_mtok": 800_000,
                    "output_micro_per_mtok": 4_000_000,
                }
            ],
        },
        {
            "name": "stub-router",
            "kind": "openrouter",
            "base_url": f"{stub_url}/api/v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {
                    "name": "router-mini",
                    "upstream": "openai/gpt-4o-mini",
                    "input_micro_per_mtok": 200_000,
                    "output_micro_per_mtok": 800_000,
                }
            ],
        },
    ]


def install_profiles(stub_url: str, spec: list[dict] | None = None) -> None:
    """Install stub profiles with their platform key; announce once the keys are saved.

    One transaction, so the bus message (sent on commit) never makes a replica reload a
    profile whose key is not stored yet. (Without Redis there is no bus to race, and SQLite
    is better off with short transactions.)
    """
    from django.db import transaction

    from providers.models import ProviderProfile
    from providers.services import profile_set_platform_key, profiles_bootstrap

    with transaction.atomic() if HAS_REDIS else nullcontext():
        for profile in profiles_bootstrap(spec=spec or stub_profiles(stub_url)):
            profile_set_platform_key(profile=profile, api_key=PLATFORM_KEY)
            profile.save()
    assert ProviderProfile.objects.count() >= 1


@dataclass
class Stack:
    """A running gateway with stub profiles installed, and a helper to make tenants."""

    gateway: Gateway
    stub: Stub

    @property
    def url(self) -> str:
        return self.gateway.url

    def tenant(self, **kwargs) -> Tenant:
        tenant = make_tenant(**kwargs)
        return tenant

    def openai(self, tenant: Tenant, **kwargs):
        import openai

        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=tenant.api_key, max_retries=0, **kwargs
        )

    def anthropic(self, tenant: Tenant, **kwargs):
        import anthropic

        return anthropic.Anthropic(
            base_url=self.url, api_key=tenant.api_key, max_retries=0, **kwargs
        )


@pytest.fixture
def stack(transactional_db, shared_gateway, stub) -> Stack:
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    shared_gateway.reload()
    return Stack(gateway=shared_gateway, stub=stub)


def usage_rows(
    request_ids: list[str] | None = None, *, group_id: int | None = None, expect: int | None = None
):
    """Return usage rows (waiting for the batched writer to store `expect` of them).

    Filter by request ids or group: rows of an earlier test may land late in a shared gateway.
    """
    from django.db.models import Q

    from usage.models import UsageLog

    assert request_ids is not None or group_id is not None, "filter by request ids or group"

    def rows():
        qs = UsageLog.objects.order_by("id")
        if request_ids is not None:
            qs = qs.filter(Q(client_request_id__in=request_ids) | Q(request_id__in=request_ids))
        if group_id is not None:
            qs = qs.filter(group_id=group_id)
        found = list(qs)
        return found if expect is None or len(found) >= expect else None

    return wait_until(rows, timeout_s=15, what=f"{expect} usage rows")


# ---------------------------------------------------------------- helpers for tests/gateway


def fast_profiles(stub_url: str, *, timeout_s: int = 1, idle_s: int = 1) -> list[dict]:
    """The stub profiles with short deadlines, for hang / slow / timeout tests."""
    spec = stub_profiles(stub_url)
    for profile in spec:
        profile["timeout_s"] = timeout_s
        profile["stream_idle_timeout_s"] = idle_s
    return spec


def own_stack(gateway: Gateway, stub: Stub, spec: list[dict] | None = None) -> Stack:
    """Prepare a test's own gateway like the `stack` fixture does the shared one."""
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url, spec)
    gateway.reload()
    return Stack(gateway=gateway, stub=stub)


def settled(tenant: Tenant, count: int) -> list:
    """Wait for the tenant's `count` usage rows and for nothing of it to be held any more."""
    from billing.models import Reservation, SpendHold

    rows = usage_rows(group_id=tenant.group_id, expect=count)
    wait_until(
        lambda: (
            not SpendHold.objects.filter(group_id=tenant.group_id, status="held").exists()
            and not Reservation.objects.filter(
                wallet__account_id=tenant.account_id, status="pending"
            ).exists()
        ),
        what="holds to settle",
    )
    return rows


def metric_samples(url: str) -> dict[tuple[str, tuple], float]:
    """Scrape /metrics: {(sample name, sorted label items): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(url: str, name: str, **labels: str) -> float:
    """Return one sample of a gateway's /metrics (0.0 when it was never set)."""
    return metric_samples(url).get((name, tuple(sorted(labels.items()))), 0.0)


def sse_events(text: str) -> list[tuple[str, str]]:
    """Split an SSE body into (event name, data) pairs ("" when the event is unnamed)."""
    events = []
    for block in text.split("\n\n"):
        name, data = "", []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, "\n".join(data)))
    return events


def seconds_left_in_minute() -> float:
    return 60 - time.time() % 60


def fresh_rate_window(min_left_s: float = 12.0) -> None:
    """Wait (if needed) until the fixed one-minute rate window has min_left_s left."""
    wait_until(
        lambda: seconds_left_in_minute() >= min_left_s,
        timeout_s=min_left_s + 2,
        interval_s=0.1,
        what="a rate window with room for the test",
    )


@dataclass
class RedisServer:
    """A redis-server of a test's own, to stop, pause and restart on the same port."""

    port: int
    proc: subprocess.Popen | None = None

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
                "--appendonly",
                "no",
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
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def own_redis():
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("needs the redis-server binary")
    server = RedisServer(port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tolerant_gateway(gateway_factory):
    """A gateway whose breakers never open: for tests that inject upstream failures."""
    return gateway_factory(TOLLGATE_BREAKER_FAILURES="1000000")


@pytest.fixture(scope="module")
def module_gateways(gateway_factory):
    """Start gateways for one test module (gateway_factory's env overrides); they stop when
    the module is done, so a long run never holds every gateway's connections at once."""
    started: list[Gateway] = []

    def start(**env: str) -> Gateway:
        gateway = gateway_factory(**env)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()
