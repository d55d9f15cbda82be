"""The container image and compose.yaml, run as an operator runs them, on podman.

The image is built from the Dockerfile; the stack (PostgreSQL, Redis with an append-only
file, migrate, gateway, control plane, Celery worker and beat, plus the stub vendor from
tests/deploy/compose.test.yaml) is started with podman-compose and driven from outside
through its ports on 127.0.0.1: a streamed completion with the official SDK, its usage row,
a dashboard sign-in behind a (simulated) TLS proxy, beat's reaper run by the worker, and the
data kept across `down` and `up`.

This machine reaches no registry: scripts/deploy-prereqs.sh installs podman and builds the
base image and the postgres / redis stand-ins (deploy/test-images/), kept between runs.
Two things podman 4.3 (Debian bookworm) lacks without systemd, which the test does itself:
health checks run only when asked (`podman healthcheck run`: systemd timers would run them),
and podman-compose then ignores `condition: service_healthy` (and podman 4.3 cannot start a
container whose `--requires` chain is two deep). So the test brings the stack up in the
order its depends_on says, each step once the previous is healthy or has exited 0, with
`up --no-deps`: the same containers, commands, health checks and volumes compose.yaml names.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest

from tests.support.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "tollgate-ci"  # fixed: a crashed run's leftovers are cleared by the next one
IMAGE = "localhost/tollgate:ci"
BASE_IMAGE = os.environ.get("DEPLOY_BASE_IMAGE", "localhost/tollgate-base")
POSTGRES_IMAGE = os.environ.get("DEPLOY_POSTGRES_IMAGE", "localhost/tollgate-test-postgres")
REDIS_IMAGE = os.environ.get("DEPLOY_REDIS_IMAGE", "localhost/tollgate-test-redis")
# The index is reached through a TLS-inspecting proxy that the host trusts: the build gets
# the host's CA bundle as a build secret (never a layer).
PIP_CA = os.environ.get("DEPLOY_PIP_CA", "/etc/ssl/certs/ca-certificates.crt")
PASSWORD = "a-long-enough-password-for-the-compose-test"
MODEL = "gpt-4o-mini"
# What the others need (the stores, the fake vendor), then Tollgate's long-running processes.
BACKING, APP = ("postgres", "redis", "stub"), ("gateway", "control", "worker", "beat")

pytestmark = pytest.mark.timeout(900)


def _unavailable(reason: str):
    if os.environ.get("TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(f"TEST_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    """Return the environment for podman and podman-compose, prerequisites made."""
    if shutil.which("podman") is None:
        _unavailable(
            "podman is not installed: run scripts/deploy-prereqs.sh as root (Debian bookworm)"
        )
    made = subprocess.run(
        [ROOT / "scripts" / "deploy-prereqs.sh"], capture_output=True, text=True, timeout=600
    )
    assert made.returncode == 0, made.stderr[-4000:]
    exports = dict(re.findall(r"^export (\w+)=(.*)$", made.stdout, re.M))
    # Nothing of the suite's own settings reaches compose: a shell variable would win over
    # the stack's .env in compose.yaml's ${...} (POSTGRES_PASSWORD, GATEWAY_WORKERS, ...).
    ours = ("TOLLGATE_", "GATEWAY_", "CONTROL_", "POSTGRES_", "REDIS_", "DATABASE_URL")
    return {k: v for k, v in os.environ.items() if not k.startswith(ours)} | exports


@pytest.fixture(scope="module")
def image(tools) -> str:
    """Build the Tollgate image from the Dockerfile (layers cached); return its name."""
    old = _podman(tools, "image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout
    secret = ["--secret", f"id=pip_ca,src={PIP_CA}"] if Path(PIP_CA).is_file() else []
    started = time.monotonic()
    _podman(
        tools,
        "build",
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        *secret,
        "-t",
        IMAGE,
        str(ROOT),
        timeout=900,
    )
    size = int(_podman(tools, "image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    print(f"built {IMAGE} in {time.monotonic() - started:.0f} s: {size / 1e6:.0f} MB")
    new = _podman(tools, "image", "inspect", "--format", "{{.Id}}", IMAGE).stdout
    if old.strip() and old != new:  # the previous build, now untagged: ours to remove
        _podman(tools, "rmi", old.strip(), check=False)
    return IMAGE


def _podman(env: dict, *args: str, check: bool = True, timeout: float = 120):
    done = subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr[-4000:]}"
    return done


def _free_loopback_ports(count: int) -> list[int]:
    """Ports in 18400-18499 free on 127.0.0.1 (CI's own PostgreSQL and Redis are elsewhere)."""
    found = []
    for port in range(18400, 18500):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    pytest.fail("no free ports in 127.0.0.1:18400-18499")


class Stack:
    """compose.yaml and the test's override in a project directory of their own, with .env."""

    def __init__(self, env: dict, directory: Path, image: str):
        self.dir = directory
        self.gateway_port, self.control_port = _free_loopback_ports(2)
        self.gateway = f"http://127.0.0.1:{self.gateway_port}"
        self.control = f"http://127.0.0.1:{self.control_port}"
        shutil.copy(ROOT / "compose.yaml", directory / "compose.yaml")
        shutil.copy(
            ROOT / "tests" / "deploy" / "compose.test.yaml", directory / "compose.test.yaml"
        )
        (directory / ".env").write_text(self._dotenv())
        # What compose.yaml itself reads (never the containers): from the shell, as an operator
        # may; in .env, Tollgate's settings would refuse the unknown TOLLGATE_IMAGE.
        self.env = env | {
            "TOLLGATE_IMAGE": image,
            "POSTGRES_IMAGE": POSTGRES_IMAGE,
            "REDIS_IMAGE": REDIS_IMAGE,
            "GATEWAY_PORT": str(self.gateway_port),
            "CONTROL_PORT": str(self.control_port),
        }

    def _dotenv(self) -> str:
        db_password, app_password = secrets.token_hex(16), secrets.token_hex(16)
        profiles = [
            {
                "name": "stub-openai",
                "kind": "openai",
                "base_url": "http://stub:8765/v1",
                "api_key_env": "STUB_PLATFORM_KEY",
                "allows_platform": True,
                "timeout_s": 5,
                "models": [
                    {
                        "name": MODEL,
                        "input_micro_per_mtok": 150_000,
                        "output_micro_per_mtok": 600_000,
                    }
                ],
            }
        ]
        settings = {
            # The application's own role (migrate creates it); the owner's password apart.
            "DATABASE_URL": f"postgres://tollgate_app:{app_password}@postgres:5432/tollgate",
            "POSTGRES_PASSWORD": db_password,
            "REDIS_URL": "redis://redis:6379/0",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "SEALING_KEYS": "v1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            "TOLLGATE_CALLER_KEY": secrets.token_urlsafe(32),
            "TOLLGATE_RECEIPT_KEYS": "r1:"
            + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            # The test plays the operator's TLS proxy: it says https in X-Forwarded-Proto, so
            # production's Secure cookies stay on (and the browser below keeps them itself).
            "TOLLGATE_BEHIND_TLS_PROXY": "true",
            "TOLLGATE_PUBLIC_URL": f"https://127.0.0.1:{self.control_port}",
            # TOLLGATE_REDIS_PERSISTENCE stays `check`: compose's Redis keeps an AOF.
            # Beat's reaper runs every min(60 s, the hold TTL): seconds, for the test.
            "TOLLGATE_REQUEST_DEADLINE_S": "5",
            "TOLLGATE_RESERVATION_TTL_S": "5",
            "TOLLGATE_IDEMPOTENCY_TTL_S": "10",
            "GATEWAY_WORKERS": "1",
            "CONTROL_WORKERS": "1",
            "STUB_PLATFORM_KEY": "sk-stub-platform-" + secrets.token_hex(8),
            "PROVIDER_PROFILES_JSON": json.dumps(profiles, separators=(",", ":")),
        }
        return "".join(f"{name}={value}\n" for name, value in settings.items())

    def compose(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [self.env["PODMAN_COMPOSE"], "-p", PROJECT, "-f", "compose.yaml", "-f",
             "compose.test.yaml", *args],
            cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert done.returncode == 0, f"compose {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def podman(self, *args: str, check: bool = True, timeout: float = 120):
        return _podman(self.env, *args, check=check, timeout=timeout)

    def container(self, service: str) -> str:
        names = self.podman(
            "ps", "-a", "--format", "{{.Names}}",
            "--filter", f"label=com.docker.compose.project={PROJECT}",
            "--filter", f"label=com.docker.compose.service={service}",
        ).stdout.split()  # fmt: skip
        assert len(names) == 1, f"containers of {service}: {names}"
        return names[0]

    def healthy(self, service: str) -> bool:
        """Run the service's compose health check now (no systemd timer runs it here)."""
        return (
            self.podman("healthcheck", "run", self.container(service), check=False).returncode == 0
        )

    def logs(self, service: str) -> str:
        done = self.podman("logs", self.container(service), check=False)
        return done.stdout + done.stderr

    def report(self) -> str:
        """Every container's state and last log lines, for a failure message."""
        lines = [
            self.podman(
                "ps", "-a", "--filter", f"label=com.docker.compose.project={PROJECT}"
            ).stdout
        ]
        for service in (*BACKING, "migrate", *APP):
            try:
                lines.append(f"--- {service}\n" + "\n".join(self.logs(service).splitlines()[-25:]))
            except AssertionError as exc:
                lines.append(f"--- {service}: {exc}")
        return "\n".join(lines)

    def wait(self, check, *, what: str, timeout_s: float = 120):
        try:
            return wait_until(check, timeout_s=timeout_s, interval_s=0.5, what=what)
        except pytest.fail.Exception as exc:
            raise AssertionError(f"{exc}\n{self.report()}") from None

    def up(self) -> None:
        """Start the stack in depends_on's order (see the module docstring)."""
        self.compose("up", "-d", "--no-build", "--no-deps", *BACKING)
        self.wait(
            lambda: self.healthy("postgres") and self.healthy("redis"), what="postgres, redis"
        )
        self.compose("up", "-d", "--no-build", "--no-deps", "migrate")
        migrate = self.container("migrate")
        exit_code = self.podman("wait", migrate, timeout=180).stdout.strip()
        assert exit_code == "0", f"migrate exited {exit_code}:\n{self.logs('migrate')}"
        assert "loaded 1 profile(s): stub-openai" in self.logs("migrate")
        assert "role tollgate_app: owns" in self.logs("migrate")
        self.compose("up", "-d", "--no-build", "--no-deps", *APP)

        def planes_answer() -> bool:
            for service, url in (("gateway", self.gateway), ("control", self.control)):
                if not self.healthy(service):
                    return False
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code != 200:
                        return False
                except httpx.HTTPError:
                    return False
            return True

        self.wait(planes_answer, what="gateway and control healthy, /healthz from outside")

    def down(self, *args: str) -> None:
        self.compose("down", *args)

    def leftovers(self) -> list[str]:
        """Containers, volumes and networks of the project still on the machine."""
        label = f"label=com.docker.compose.project={PROJECT}"
        found = self.podman("ps", "-a", "-q", "--filter", label).stdout.split()
        found += self.podman("volume", "ls", "-q", "--filter", label).stdout.split()
        networks = self.podman("network", "ls", "--format", "{{.Name}}").stdout.split()
        return found + [name for name in networks if name.startswith(PROJECT)]


@pytest.fixture
def stack(tools, image, tmp_path):
    stack = Stack(tools, tmp_path, image)
    stack.down("-v")  # what a crashed earlier run left
    yield stack
    stack.down("-v")


def test_the_image_runs_as_an_unprivileged_user_without_tests_or_secrets(tools, image):
    facts = _podman(
        tools, "run", "--rm", image, "sh", "-c",
        'id -u; touch "$TOLLGATE_VAR_DIR/written" && echo writable; ls -a /app; '
        "command -v pip || echo no-pip; python -c 'import celery, gunicorn, uvicorn_worker'",
    ).stdout.split()  # fmt: skip
    assert facts[0] != "0" and "writable" in facts and "no-pip" in facts
    assert {"manage.py", "config", "gateway", "stubvendor", "templates"} <= set(facts)
    assert not {"tests", "bench", ".git", ".venv", ".env", "var"} & set(facts)
    config = json.loads(_podman(tools, "image", "inspect", image).stdout)[0]["Config"]
    assert "config.asgi:gateway_application" in " ".join(config["Cmd"])
    assert not [item for item in config["Env"] if item.startswith(("PIP_CERT", "SSL_CERT"))]


def test_the_compose_stack_serves_signs_in_reaps_holds_and_keeps_its_data_across_down_and_up(
    stack,
):
    import openai

    stack.up()

    # Provisioning from a shell in the control plane's container.
    made = stack.podman(
        "exec", stack.container("control"), "python", "manage.py", "create_tenant",
        "--name", "compose-ci", "--wallet-micro", "5000000", "--json",
    ).stdout  # fmt: skip
    tenant = json.loads(made)
    api = httpx.Client(
        base_url=stack.control, headers={"Authorization": f"Token {tenant['api_token']}"}
    )

    client = openai.OpenAI(base_url=f"{stack.gateway}/v1", api_key=tenant["api_key"], max_retries=0)
    _stream_once(client)

    def usage_rows() -> list[dict]:
        return api.get("/api/usage").json()["results"]

    row = stack.wait(usage_rows, what="the usage row")[0]
    assert (row["tokens_in"], row["tokens_out"], row["served_by"]) == (3, 8, "platform")
    assert (row["model_served"], row["streamed"], row["status"]) == (MODEL, True, 200)
    wallet = api.get(f"/api/accounts/{tenant['account_id']}/wallet").json()
    assert row["provider_cost_micro"] > 0
    assert wallet["balance_micro"] == 5_000_000 - row["provider_cost_micro"]
    assert wallet["reserved_micro"] == 0

    # The owner sets a password from create_tenant's link and signs in to the dashboard.
    browser = TlsProxiedBrowser(stack.control, public_url=f"https://127.0.0.1:{stack.control_port}")
    form = browser.request("GET", tenant["password_link"])
    browser.request("POST", str(form.url), {"new_password1": PASSWORD, "new_password2": PASSWORD})
    browser.sign_in(tenant["username"], PASSWORD)
    assert 'id="wallet-balance"' in browser.request("GET", "/dashboard/").text
    assert {"sessionid", "csrftoken"} <= browser.secure_cookies

    # Every serving container runs as the application's role, without the owner's password,
    # and that role may only insert into and read the proof.
    def psql(query: str) -> str:
        return stack.podman(
            "exec", stack.container("postgres"), "psql", "-U", "tollgate", "-d", "tollgate",
            "-tAc", query,
        ).stdout.strip()  # fmt: skip

    sessions = psql(
        "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = 'tollgate'"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    assert sessions.split() == ["tollgate_app"]
    assert (
        psql(
            "SELECT string_agg(relname || ':' || has_table_privilege('tollgate_app', oid, 'UPDATE')"
            " || has_table_privilege('tollgate_app', oid, 'INSERT'), ',' ORDER BY relname)"
            " FROM pg_class WHERE relname IN ('audit_auditentry', 'billing_receipt')"
        )
        == "audit_auditentry:falsetrue,billing_receipt:falsetrue"
    )
    for service in APP:
        env = stack.podman("exec", stack.container(service), "env").stdout.splitlines()
        assert "POSTGRES_PASSWORD=" in env and "DATABASE_OWNER_URL" not in "".join(env)
    checked = stack.podman(
        "exec", stack.container("control"), "python", "manage.py", "check", "--deploy",
        check=False,
    )  # fmt: skip
    assert "tollgate.W040" not in checked.stdout + checked.stderr

    # Beat schedules the reaper; the worker runs it.
    reaped = re.compile(r"Task billing\.expire_stale_holds\[[^\]]+\] succeeded")
    stack.wait(lambda: reaped.search(stack.logs("worker")), what="beat's reaper run by the worker")
    assert "Sending due task billing-expire-stale-holds" in stack.logs("beat")

    # Down (volumes kept) and up again: the same key serves, the wallet is where it was.
    stack.down()
    kept = [f"{PROJECT}_{volume}" for volume in ("archives", "beat", "pgdata", "redisdata")]
    assert sorted(stack.leftovers()) == kept
    stack.up()
    again = api.get(f"/api/accounts/{tenant['account_id']}/wallet").json()
    assert again["balance_micro"] == wallet["balance_micro"]
    _stream_once(client)
    stack.wait(lambda: len(usage_rows()) == 2, what="the second usage row")
    browser = TlsProxiedBrowser(stack.control, public_url=f"https://127.0.0.1:{stack.control_port}")
    browser.sign_in(tenant["username"], PASSWORD)

    stack.down("-v")
    assert stack.leftovers() == []


def _stream_once(client) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "three words here"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert MODEL in text
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 8)


class TlsProxiedBrowser:
    """A browser behind the operator's TLS proxy: plain http to the control plane's port with
    X-Forwarded-Proto: https, as the proxy sends it. The session and CSRF cookies are then
    Secure, which httpx's cookie jar never sends over http, so this one keeps them itself."""

    CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')

    def __init__(self, url: str, *, public_url: str):
        self.public_url = public_url
        self.cookies: dict[str, str] = {}
        self.secure_cookies: set[str] = set()
        self.csrf_token = ""
        self.client = httpx.Client(base_url=url, headers={"X-Forwarded-Proto": "https"}, timeout=10)

    def request(self, method: str, url: str, data: dict | None = None) -> httpx.Response:
        """Send one request (a form post with the last form's CSRF token), follow redirects."""
        for _ in range(5):
            path = httpx.URL(url).raw_path.decode()
            headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
            if data is not None:
                headers |= {"Origin": self.public_url, "Referer": self.public_url + path}
                data = {"csrfmiddlewaretoken": self.csrf_token} | data
            response = self.client.request(method, path, data=data, headers=headers)
            for line in response.headers.get_list("set-cookie"):
                for name, morsel in SimpleCookie(line).items():
                    self.cookies[name] = morsel.value
                    if morsel["secure"]:
                        self.secure_cookies.add(name)
            if response.status_code not in (301, 302, 303):
                assert response.status_code == 200, f"{method} {path}: {response.status_code}"
                if found := self.CSRF_FIELD.search(response.text):
                    self.csrf_token = found.group(1)
                return response
            method, url, data = "GET", response.headers["location"], None
        raise AssertionError(f"too many redirects from {url}")

    def sign_in(self, username: str, password: str) -> None:
        self.request("GET", "/login/")
        page = self.request("POST", "/login/", {"username": username, "password": password})
        assert 'id="wallet-balance"' in page.text, page.text[:2000]
