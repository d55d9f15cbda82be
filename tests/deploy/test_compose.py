"""compose.yaml and the image, brought up as docs/production.md says, on podman-compose and on
Docker Compose.

In a copy of the checkout, as an operator holds it: `.env` copied from `.env.example` and
edited, a `profiles.json` beside compose.yaml (docs/providers.md), and the documented
commands verbatim, run without a terminal (the docs check, tests/docs/test_docs_commands.py,
holds this file to them): `podman-compose build` (the one build of the stack, its base and
the pip CA from the documented BASE_IMAGE and BUILD_PIP_CA), `podman-compose up -d`, the
operator's login with `createsuperuser --noinput`, `create_tenant`, `run --rm migrate` and
`down`. The stub vendor joins the stack through tests/deploy/compose.test.yaml, copied as
compose.override.yaml, which both engines read by themselves.

The whole scenario runs twice: with podman-compose, and with Docker Compose (the real v5
binary, `docker compose` with `podman-compose` replaced) driving podman's Docker-compatible
API, which the test serves itself (`podman system service`) since no Docker engine runs on
this machine. Docker Compose builds only through the buildx plugin, which no registry here
ships: its `build` must fail for exactly that reason (and nothing else), and the stack then
runs the image podman-compose's build tagged in the same store. Where buildx exists, the
test takes Docker Compose's own build instead.

Nothing stages the start: podman 4.3 (Debian bookworm) without systemd runs no health checks
and podman-compose ignores health conditions there, so each Tollgate process waits itself
(`manage.py wait_ready`) for PostgreSQL, Redis and migrate's schema and grants. Then, from
outside through the published ports: a streamed completion with the official SDK, its usage
row, a dashboard sign-in behind a (simulated) TLS proxy, beat's reaper run by the worker,
each container holding only the settings it needs, a bad profiles file refused in one line,
a second `up -d` on the live stack (migrate again, a stopped service started, the rest
untouched), and the data kept across `down` and `up`.

This machine reaches no registry: scripts/deploy-prereqs.sh installs podman and
podman-compose and builds the base image and the postgres / redis stand-ins
(deploy/test-images/), kept between runs.
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
import tempfile
import time
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest

from tests.deploy.test_procfile import edit_env_file, operator_checkout
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
OPS_PASSWORD = "a-long-enough-password-for-the-operator"
MODEL = "gpt-4o-mini"
# Tollgate's long-running processes, and the containers that must hold none of its settings.
APP = ("gateway", "control", "worker", "beat")
SERVICES = ("postgres", "redis", "stub", "migrate", *APP)

# docs/production.md, "Path 1: containers (compose)", verbatim.
COPY_SETTINGS = "cp .env.example .env"
BUILD = "podman-compose build"
UP = "podman-compose up -d"
SUPERUSER = (
    'DJANGO_SUPERUSER_PASSWORD="$OPS_PASSWORD" podman-compose exec -T -e '
    "DJANGO_SUPERUSER_PASSWORD control python manage.py createsuperuser --noinput "
    "--username ops --email ops@example.com"
)
CREATE_TENANT = (
    "podman-compose exec -T control python manage.py create_tenant --name acme "
    "--wallet-micro 5000000 --json"
)
DOWN = "podman-compose down"
# docs/providers.md, "2. Load them": migrate again, after a change of profiles.json.
RELOAD_PROFILES = "podman-compose run --rm migrate"

pytestmark = pytest.mark.timeout(1200)

# The documented commands name podman-compose; with Docker, `docker compose` takes its place.
PODMAN_COMPOSE, DOCKER_COMPOSE = "podman-compose", "docker compose"
# What Docker Compose says when the build needs BuildKit (compose.yaml's build secret) and the
# buildx plugin is missing: the one build failure the Docker run accepts.
NO_BUILDX = "building with BuildKit requires the buildx Docker CLI plugin"


def _unavailable(reason: str):
    if os.environ.get("TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(f"TEST_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    """Return a shell's environment with podman-compose on its PATH and the `docker compose`
    plugin in its DOCKER_CONFIG, prerequisites made."""
    if shutil.which("podman") is None:
        _unavailable(
            "podman is not installed: run scripts/deploy-prereqs.sh as root (Debian bookworm)"
        )
    made = subprocess.run(
        [ROOT / "scripts" / "deploy-prereqs.sh"], capture_output=True, text=True, timeout=600
    )
    assert made.returncode == 0, made.stderr[-4000:]
    exports = dict(re.findall(r"^export (\w+)=(.*)$", made.stdout, re.M))
    tools_bin = str(Path(exports.pop("PODMAN_COMPOSE")).parent)
    # A clean shell: none of the suite's settings (a shell variable wins over the stack's
    # .env in compose.yaml's ${...} and in what it passes to containers).
    return {
        "PATH": f"{tools_bin}:{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", "/root"),
        **exports,
    }


@pytest.fixture(scope="module")
def docker_host(tools):
    """podman's Docker-compatible API on a socket of the test's own: Docker Compose's engine."""
    if shutil.which("docker") is None:
        _unavailable("the docker CLI is not installed (Docker Compose runs as its plugin)")
    folder = Path(tempfile.mkdtemp(prefix="tg-podman-"))  # short: a socket path fits 108 bytes
    host = f"unix://{folder / 'podman.sock'}"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", host],
        env=tools, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    env = tools | {"DOCKER_HOST": host}

    def answers() -> bool:
        return subprocess.run(["docker", "version"], env=env, capture_output=True).returncode == 0

    try:
        wait_until(answers, timeout_s=30, interval_s=0.2, what="podman's Docker API")
        yield host
    finally:
        service.terminate()
        service.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


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
    """An operator's checkout with .env, profiles.json and the test's override, and a shell."""

    def __init__(self, env: dict, tmp_path: Path, *, compose: str = PODMAN_COMPOSE):
        self.compose = compose
        self.dir = operator_checkout(tmp_path)
        shutil.copy(
            ROOT / "tests" / "deploy" / "compose.test.yaml", self.dir / "compose.override.yaml"
        )
        self.gateway_port, self.control_port = _free_loopback_ports(2)
        self.gateway = f"http://127.0.0.1:{self.gateway_port}"
        self.control = f"http://127.0.0.1:{self.control_port}"
        # What compose.yaml itself reads, from the shell as an operator may (or from .env).
        self.env = env | {
            "COMPOSE_PROJECT_NAME": PROJECT,
            "TOLLGATE_IMAGE": IMAGE,
            "POSTGRES_IMAGE": POSTGRES_IMAGE,
            "REDIS_IMAGE": REDIS_IMAGE,
            "BASE_IMAGE": BASE_IMAGE,
            "GATEWAY_PORT": str(self.gateway_port),
            "CONTROL_PORT": str(self.control_port),
            "OPS_PASSWORD": OPS_PASSWORD,
        }
        if Path(PIP_CA).is_file():
            self.env["BUILD_PIP_CA"] = PIP_CA
        self.sh(COPY_SETTINGS)
        self.settings = self._settings()
        edit_env_file(self.dir / ".env", self.settings)
        self.write_profiles(json.dumps(self._profiles()))

    def _profiles(self) -> list[dict]:
        return [
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

    def write_profiles(self, text: str) -> None:
        (self.dir / "profiles.json").write_text(text)

    def _settings(self) -> dict[str, str]:
        """The operator's edits of .env: every change-me, this host's names."""
        public = f"https://127.0.0.1:{self.control_port}"
        return {
            # The application's own role (migrate creates it); the owner's password apart.
            "DATABASE_URL": f"postgres://tollgate_app:{secrets.token_hex(16)}@postgres:5432/tollgate",
            "POSTGRES_PASSWORD": secrets.token_hex(16),
            "SECRET_KEY": secrets.token_urlsafe(50),
            "SEALING_KEYS": "v1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            "TOLLGATE_CALLER_KEY": secrets.token_urlsafe(32),
            "TOLLGATE_RECEIPT_KEYS": "r1:"
            + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            "GATEWAY_INTERNAL_TOKEN": secrets.token_urlsafe(32),
            "TOLLGATE_METRICS_TOKEN": secrets.token_urlsafe(32),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "CSRF_TRUSTED_ORIGINS": public,
            # The test plays the operator's TLS proxy: it says https in X-Forwarded-Proto, so
            # production's Secure cookies stay on (and the browser below keeps them itself);
            # it reaches the planes on plain http from outside, so no redirect to https.
            "TOLLGATE_BEHIND_TLS_PROXY": "true",
            "TOLLGATE_SSL_REDIRECT": "false",
            "TOLLGATE_PROXY_HOPS": "0",
            "TOLLGATE_PUBLIC_URL": public,
            # TOLLGATE_REDIS_PERSISTENCE stays `check`: compose's Redis keeps an AOF.
            # Beat's reaper runs every min(60 s, the hold TTL): seconds, for the test.
            "TOLLGATE_REQUEST_DEADLINE_S": "5",
            "TOLLGATE_RESERVATION_TTL_S": "5",
            "TOLLGATE_IDEMPOTENCY_TTL_S": "10",
            "GATEWAY_WORKERS": "1",
            "CONTROL_WORKERS": "1",
            "STUB_PLATFORM_KEY": "sk-stub-platform-" + secrets.token_hex(8),
        }

    def sh(self, command: str, *, check: bool = True, timeout: float = 300, compose: str = ""):
        """Run one documented command as the operator types it, without a terminal, with this
        stack's compose (or `compose`) in podman-compose's place."""
        command = command.replace(PODMAN_COMPOSE, compose or self.compose)
        done = subprocess.run(
            ["bash", "-c", command], cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
        return done

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

    def env_names(self, service: str) -> set[str]:
        """The names of the variables the service's container was given."""
        found = self.podman("inspect", "--format", "{{json .Config.Env}}", self.container(service))
        return {item.split("=", 1)[0] for item in json.loads(found.stdout)}

    def exit_codes_since(self, since: str, service: str, *, run: bool = False) -> list[str]:
        """The exit codes of Docker Compose's containers of the service (its one-off `run`
        containers with `run`) that ended since `since`, in order. podman ORs the filters on
        one key: the name (`<project>-<service>-1`, `<project>-<service>-run-<id>`) picks."""
        died = self.podman(
            "events", "--stream=false", "--since", since, "--filter", "event=died",
            "--format", "{{.ContainerExitCode}} {{.Name}}",
        )  # fmt: skip
        name = re.compile(rf"{PROJECT}-{service}-{'run-[0-9a-f]+' if run else '[0-9]+'}")
        runs = [line.split() for line in died.stdout.splitlines()]
        return [code for code, container in runs if name.fullmatch(container)]

    def started_at(self, service: str) -> str:
        return self.podman(
            "inspect", "--format", "{{.State.StartedAt}}", self.container(service)
        ).stdout

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
        for service in SERVICES:
            try:
                lines.append(f"--- {service}\n" + "\n".join(self.logs(service).splitlines()[-25:]))
            except AssertionError as exc:
                lines.append(f"--- {service}: {exc}")
        return "\n".join(lines)

    def wait(self, check, *, what: str, timeout_s: float = 180):
        try:
            return wait_until(check, timeout_s=timeout_s, interval_s=0.5, what=what)
        except pytest.fail.Exception as exc:
            raise AssertionError(f"{exc}\n{self.report()}") from None

    def up(self) -> None:
        """`podman-compose up -d`, then both planes answering from outside."""
        self.sh(UP)

        def planes_answer() -> bool:
            try:
                return all(
                    httpx.get(f"{url}/healthz", timeout=2).status_code == 200
                    for url in (self.gateway, self.control)
                )
            except httpx.HTTPError:
                return False

        self.wait(planes_answer, what="gateway and control /healthz from outside")
        migrate = self.container("migrate")
        exit_code = self.podman("wait", migrate, timeout=180).stdout.strip()
        assert exit_code == "0", f"migrate exited {exit_code}:\n{self.logs('migrate')}"
        assert "loaded 1 profile(s): stub-openai" in self.logs("migrate")
        assert "role tollgate_app: owns" in self.logs("migrate")
        # podman's DNS for the network (aardvark-dns) reloads as migrate's container goes;
        # once seen failing a lookup just after, under Docker Compose: the next command
        # (an exec into control) starts once control resolves the database's name.
        control = self.container("control")

        def resolves() -> bool:
            found = self.podman("exec", control, "getent", "hosts", "postgres", check=False)
            return found.returncode == 0

        self.wait(resolves, what="control resolving postgres", timeout_s=60)

    def leftovers(self) -> list[str]:
        """Containers, volumes and networks of the project still on the machine."""
        label = f"label=com.docker.compose.project={PROJECT}"
        found = self.podman("ps", "-a", "-q", "--filter", label).stdout.split()
        found += self.podman("volume", "ls", "-q", "--filter", label).stdout.split()
        networks = self.podman("network", "ls", "--format", "{{.Name}}").stdout.split()
        return found + [name for name in networks if name.startswith(PROJECT)]


def _podman(env: dict, *args: str, check: bool = True, timeout: float = 120):
    done = subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module", params=[PODMAN_COMPOSE, DOCKER_COMPOSE])
def stack(request, tools, tmp_path_factory):
    """The operator's checkout, its image built with the documented `build` of its compose."""
    compose = request.param
    env = tools
    if compose == DOCKER_COMPOSE:
        env = tools | {"DOCKER_HOST": request.getfixturevalue("docker_host")}
    stack = Stack(env, tmp_path_factory.mktemp("compose"), compose=compose)
    stack.sh(f"{DOWN} -v", check=False)  # what a crashed earlier run left
    old = stack.podman("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout
    started = time.monotonic()
    built = stack.sh(BUILD, timeout=900, check=False)
    output = built.stdout + built.stderr
    if compose == DOCKER_COMPOSE and built.returncode != 0:
        # No buildx here (module docstring): refused for that reason alone, before any step.
        assert NO_BUILDX in output, output[-3000:]
        print(f"{DOCKER_COMPOSE} build: no buildx plugin here; built by {PODMAN_COMPOSE}")
        built = stack.sh(BUILD, timeout=900, compose=PODMAN_COMPOSE)
        output = built.stdout + built.stderr
    assert built.returncode == 0, f"{BUILD}:\n{output[-3000:]}"
    size = int(stack.podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    if "Successfully tagged" in output or compose == PODMAN_COMPOSE:
        # One image for the five Tollgate services: one `podman build`, its base read once.
        assert output.count("Successfully tagged") == 1, output[-3000:]
    # A build that installs (no cached layer) warns of no missing extra: a current pip.
    assert "does not provide the extra" not in output, output[-3000:]
    print(f"built {IMAGE} in {time.monotonic() - started:.0f} s: {size / 1e6:.0f} MB")
    new = stack.podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout
    if old.strip() and old != new:  # the previous build, now untagged: ours to remove
        stack.podman("rmi", old.strip(), check=False)
    yield stack
    stack.sh(f"{DOWN} -v", check=False)


@pytest.mark.parametrize("stack", [PODMAN_COMPOSE], indirect=True)  # one image, looked at once
def test_the_image_runs_as_an_unprivileged_user_without_tests_or_secrets(stack):
    facts = stack.podman(
        "run", "--rm", IMAGE, "sh", "-c",
        'id -u; touch "$TOLLGATE_VAR_DIR/written" && echo writable; ls -a /app; '
        "command -v pip || echo no-pip; python -c 'import celery, gunicorn, uvicorn_worker'",
    ).stdout.split()  # fmt: skip
    assert facts[0] != "0" and "writable" in facts and "no-pip" in facts
    assert {"manage.py", "config", "gateway", "stubvendor", "templates"} <= set(facts)
    assert not {"tests", "bench", ".git", ".venv", ".env", "var", "profiles.json"} & set(facts)
    config = json.loads(stack.podman("image", "inspect", IMAGE).stdout)[0]["Config"]
    assert "config.asgi:gateway_application" in " ".join(config["Cmd"])
    assert not [item for item in config["Env"] if item.startswith(("PIP_CERT", "SSL_CERT"))]


def test_the_compose_stack_serves_signs_in_reaps_holds_and_keeps_its_data_across_down_and_up(
    stack,
):
    import openai

    stack.up()

    # The operator's login and a tenant, from a shell with no terminal.
    stack.sh(SUPERUSER)
    made = stack.sh(CREATE_TENANT).stdout
    tenant = json.loads(made)

    def clients() -> tuple[httpx.Client, openai.OpenAI]:
        """The tenant's API and SDK clients, with connections of their own."""
        api = httpx.Client(
            base_url=stack.control, headers={"Authorization": f"Token {tenant['api_token']}"}
        )
        sdk = openai.OpenAI(
            base_url=f"{stack.gateway}/v1", api_key=tenant["api_key"], max_retries=0
        )
        return api, sdk

    api, client = clients()
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

    # The owner sets a password from create_tenant's link and signs in to the dashboard;
    # the operator signs in to the admin.
    public = f"https://127.0.0.1:{stack.control_port}"
    browser = TlsProxiedBrowser(stack.control, public_url=public)
    form = browser.request("GET", tenant["password_link"])
    browser.request("POST", str(form.url), {"new_password1": PASSWORD, "new_password2": PASSWORD})
    browser.sign_in(tenant["username"], PASSWORD)
    assert 'id="wallet-balance"' in browser.request("GET", "/dashboard/").text
    assert {"sessionid", "csrftoken"} <= browser.secure_cookies
    admin = TlsProxiedBrowser(stack.control, public_url=public)
    admin.request("GET", "/django-admin/login/")
    page = admin.request(
        "POST", "/django-admin/login/?next=/django-admin/",
        {"username": "ops", "password": OPS_PASSWORD, "next": "/django-admin/"},
    )  # fmt: skip
    assert "/django-admin/logout/" in page.text, page.text[:2000]

    # Every serving container runs as the application's role, and that role may only insert
    # into and read the proof.
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
    checked = stack.podman(
        "exec", stack.container("control"), "python", "manage.py", "check", "--deploy",
        check=False,
    )  # fmt: skip
    assert "tollgate.W040" not in checked.stdout + checked.stderr

    # Each container holds only the settings it needs (compose.yaml's `environment:`).
    ours = set(stack.settings)
    given = {service: stack.env_names(service) & ours for service in SERVICES}
    assert given["redis"] == given["stub"] == set()
    assert given["postgres"] == {"POSTGRES_PASSWORD"}
    assert [service for service in SERVICES if "POSTGRES_PASSWORD" in given[service]] == [
        "postgres"
    ]
    assert "DATABASE_OWNER_URL" in stack.env_names("migrate")
    assert not [s for s in APP if "DATABASE_OWNER_URL" in stack.env_names(s)]
    assert {"SECRET_KEY", "SEALING_KEYS", "DATABASE_URL"} <= given["control"]
    holders = {
        name: [service for service in SERVICES if name in given[service]]
        for name in ("GATEWAY_INTERNAL_TOKEN", "TOLLGATE_METRICS_TOKEN", "STUB_PLATFORM_KEY")
    }
    assert holders == {
        "GATEWAY_INTERNAL_TOKEN": ["gateway"],
        "TOLLGATE_METRICS_TOKEN": ["gateway"],
        "STUB_PLATFORM_KEY": ["migrate", "gateway", "worker"],
    }

    # Beat schedules the reaper; the worker runs it.
    reaped = re.compile(r"Task billing\.expire_stale_holds\[[^\]]+\] succeeded")
    stack.wait(lambda: reaped.search(stack.logs("worker")), what="beat's reaper run by the worker")
    assert "Sending due task billing-expire-stale-holds" in stack.logs("beat")

    # A broken profiles file: migrate says so in one line, no traceback; fixed, it loads.
    broken = '[{"name": "stub-openai",'
    stack.write_profiles(broken)
    since = str(int(time.time()))
    refused = stack.sh(RELOAD_PROFILES, check=False)
    if stack.compose == PODMAN_COMPOSE:
        assert refused.returncode != 0
    else:
        # podman's Docker API (4.3) answers the wait for a removed container with 0
        # (containers/podman#18889), so `docker compose run --rm` exits 0 on it whatever
        # migrate did (on Docker's engine it exits with migrate's code). The engine's record
        # of the run says what migrate exited with.
        assert stack.exit_codes_since(since, "migrate", run=True) == ["1"]
    assert "Traceback" not in refused.stderr + refused.stdout
    with pytest.raises(json.JSONDecodeError) as why:
        json.loads(broken)
    # `run` gives the command a terminal: the two streams merged, errors in colour.
    said = re.sub(r"\x1b\[[0-9;]*m", "", refused.stdout + refused.stderr).splitlines()
    errors = [line.strip() for line in said if line.startswith("CommandError")]
    assert errors == [
        f"CommandError: Malformed setting PROVIDER_PROFILES_JSON: {why.value}"
        " (given: /etc/tollgate/profiles.json)"
    ], said[-30:]
    stack.write_profiles(json.dumps(stack._profiles()))
    assert "loaded 1 profile(s): stub-openai" in stack.sh(RELOAD_PROFILES).stdout

    # `up -d` again on the live stack: migrate runs again, a stopped service starts again
    # (the same container, with its wait), nothing else is touched.
    gateway, started = stack.container("gateway"), stack.started_at("control")
    stack.podman("stop", gateway)
    since = str(int(time.time()))
    stack.up()
    assert stack.container("gateway") == gateway
    if stack.compose == PODMAN_COMPOSE:
        assert stack.started_at("control") == started
        assert stack.logs("migrate").count("loaded 1 profile(s): stub-openai") == 2
    else:
        # Docker Compose (5.2 on) recreates every running container of the stack here: it
        # finds a container on the wrong network when the network id it holds differs from
        # the network's, and podman 4.3's API names the network where Docker gives its id.
        # On Docker's engine the two agree and nothing is touched. Recreated, the stack
        # still serves below with its data (named volumes), and migrate ran once more.
        assert stack.started_at("control") > started
        assert stack.exit_codes_since(since, "migrate") == ["0"]
    _stream_once(client)
    stack.wait(lambda: len(usage_rows()) == 2, what="the usage row after the second up")

    # Down (volumes kept) and up again: the same key serves, the wallet is where it was.
    stack.sh(DOWN)
    kept = [f"{PROJECT}_{volume}" for volume in ("archives", "beat", "pgdata", "redisdata")]
    assert sorted(stack.leftovers()) == kept
    stack.up()
    # New clients, as a tenant's would be after an outage: a keep-alive connection kept from
    # before `down` may go to a container that is gone (its close never reached us).
    api, client = clients()
    again = api.get(f"/api/accounts/{tenant['account_id']}/wallet").json()
    assert again["balance_micro"] == wallet["balance_micro"] - row["provider_cost_micro"]
    _stream_once(client)
    stack.wait(lambda: len(usage_rows()) == 3, what="the usage row after down and up")
    browser = TlsProxiedBrowser(stack.control, public_url=public)
    browser.sign_in(tenant["username"], PASSWORD)

    stack.sh(f"{DOWN} -v")
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
