"""The Procfile path of docs/production.md and the walkthrough of docs/providers.md, run as
an operator runs them: in a copy of the checkout, a fresh virtualenv from requirements.lock,
`.env` copied from `.env.example`, the documented commands verbatim (the docs check,
tests/docs/test_docs_commands.py, holds this file to them), on PostgreSQL and a Redis with an
append-only file. Then driven from outside: a streamed completion with the official SDK on
the platform key, the admin and dashboard sign-ins on the control plane, a team key added
with curl that serves the next requests, beat's reaper run by the worker, and one SIGTERM
stopping every process."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.config.admin_client import csrf_token
from tests.support.processes import ROOT, RedisServer, child_database_url, free_port
from tests.support.profiles import stub_profiles
from tests.support.services import requires_postgres, requires_redis
from tests.support.waits import wait_until

pytestmark = [requires_postgres, requires_redis]

# docs/production.md, "Path 2: a host without containers", verbatim.
INSTALL = ["python3 -m venv --upgrade-deps .venv", ".venv/bin/pip install -r requirements.lock"]
COPY_SETTINGS = "cp .env.example .env"
ACTIVATE = ". .venv/bin/activate"
MIGRATE = 'DATABASE_OWNER_URL="$OWNER_URL" honcho run python manage.py migrate --noinput'
GRANT = 'DATABASE_OWNER_URL="$OWNER_URL" honcho run python manage.py grant_app_role'
# The application's role of the walkthrough (docs/production.md, "Two database roles").
APP_ROLE, APP_PASSWORD = "tollgate_app_walkthrough", "app-role-password-of-the-walkthrough"
SUPERUSER = (
    "honcho run python manage.py createsuperuser --noinput --username ops --email ops@example.com"
)
START = "honcho start"
# docs/production.md, "Logins", and docs/providers.md, verbatim.
CREATE_TENANT = (
    "honcho run python manage.py create_tenant --name acme --wallet-micro 5000000 --json"
)
LOAD_PROFILES = "honcho run python manage.py load_profiles"
ADD_TEAM_KEY = (
    'curl -sS "$TG_URL/admin/groups/$GROUP_ID/byok/openai/keys" -H "Authorization: Token '
    '$TG_API_TOKEN" -H \'Content-Type: application/json\' -d "{\\"label\\": \\"prod\\", '
    '\\"key\\": \\"$OPENAI_TEAM_KEY\\"}"'
)
FALLBACK_ON = (
    'curl -sS -X PUT "$TG_URL/admin/groups/$GROUP_ID/byok/openai" -H "Authorization: Token '
    "$TG_API_TOKEN\" -H 'Content-Type: application/json' -d '{\"fallback\": true}'"
)
LIST_MODELS = 'curl -sS "$OPENAI_BASE_URL/models" -H "Authorization: Bearer $TG_KEY"'

PLATFORM_KEY = "sk-platform-key-from-the-env-file"
TEAM_KEY = "sk-team-key-of-acme-0042"
OPS_PASSWORD = "operator-password-for-the-walkthrough"
OWNER_PASSWORD = "owner-password-for-the-walkthrough"


class Operator:
    """A shell in the operator's checkout: runs documented commands, starts honcho."""

    def __init__(self, checkout: Path, env: dict[str, str]) -> None:
        self.checkout, self.env = checkout, env
        self.honcho: subprocess.Popen | None = None
        self.log_path = checkout / "honcho.log"

    def sh(self, *commands: str, **env: str) -> str:
        script = "set -e\n" + "\n".join(commands)
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=self.checkout,
            env=self.env | env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"{commands}:\n{result.stdout}\n{result.stderr}"
        self.stderr = result.stderr
        return result.stdout

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.honcho = subprocess.Popen(
                ["bash", "-c", f"{ACTIVATE} && exec {START}"],
                cwd=self.checkout,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        assert self.honcho is not None, "not started"
        assert self.honcho.poll() is None, self.log()[-3000:]
        return True

    def stop(self) -> int:
        assert self.honcho is not None, "not started"
        self.honcho.send_signal(signal.SIGTERM)
        try:
            return self.honcho.wait(40)
        except subprocess.TimeoutExpired:
            # Every process of this checkout, whatever session honcho gave it.
            subprocess.run(["pkill", "-KILL", "-f", str(self.checkout)], check=False)
            raise


class Browser:
    """A browser on the control plane: the CSRF cookie, then forms; cookies kept by hand."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=15)
        self.cookies: dict[str, str] = {}

    def request(self, method: str, url: str, **kwargs) -> httpx.Response:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        response = self.client.request(method, url, headers=headers, **kwargs)
        for header in response.headers.get_list("set-cookie"):
            for name, morsel in SimpleCookie(header).items():
                self.cookies[name] = morsel.value
        return response

    def submit(self, url: str, fields: dict) -> httpx.Response:
        form = self.request("GET", url)
        assert form.status_code == 200, form.text[:500]
        token = csrf_token(form.text)
        return self.request("POST", str(form.url), data={"csrfmiddlewaretoken": token, **fields})


def operator_checkout(tmp_path: Path) -> Path:
    """Copy the checkout as a release tarball would hold it (tracked and new files)."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    checkout = tmp_path / "tollgate"
    for name in files:
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, checkout / name)
    return checkout


def edit_env_file(path: Path, values: dict[str, str]) -> None:
    """Set `values` in `.env` as an operator edits it: replace each line, add the rest."""
    lines, done = [], set()
    for line in path.read_text().splitlines():
        name = line.lstrip("# ").split("=", 1)[0]
        if "=" in line and name in values:
            lines.append(f"{name}={values[name]}")
            done.add(name)
        else:
            lines.append(line)
    lines += [f"{name}={value}" for name, value in values.items() if name not in done]
    path.write_text("\n".join(lines) + "\n")


def app_database_url() -> str:
    """The test database, as the application's own role."""
    owner = httpx.URL(child_database_url())
    return str(owner.copy_with(username=APP_ROLE, password=APP_PASSWORD))


@pytest.fixture
def aof_redis(tmp_path):
    server = RedisServer(port=free_port(), aof_dir=tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def operator(tmp_path, aof_redis, stub):
    checkout = operator_checkout(tmp_path)
    shell_env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "DJANGO_SUPERUSER_PASSWORD": OPS_PASSWORD,
        # The database's owner (the test's own login): on the command line, never in .env.
        "OWNER_URL": child_database_url(),
    }
    run = Operator(checkout, shell_env)
    run.sh(*INSTALL)
    # The install warns of nothing (but this machine's pip configuration: an absent index).
    warned = [w for w in run.stderr.splitlines() if "WARNING" in w and "is ignored:" not in w]
    assert warned == [], warned
    run.sh(COPY_SETTINGS)
    gateway_port, control_port = free_port(), free_port()
    # The stub stands in for OpenAI: the profile of docs/providers.md on another base URL.
    profiles = [
        {**profile, "name": "openai", "api_key_env": "OPENAI_API_KEY"}
        for profile in stub_profiles(stub.url)
        if profile["kind"] == "openai"
    ]
    (checkout / "profiles.json").write_text(json.dumps(profiles))
    edit_env_file(
        checkout / ".env",
        {
            "DATABASE_URL": app_database_url(),
            "REDIS_URL": aof_redis.url,
            "SECRET_KEY": settings.SECRET_KEY,
            "SEALING_KEYS": settings.SEALING_KEYS,
            "TOLLGATE_CALLER_KEY": "caller-key-of-the-walkthrough-0123456789",
            "TOLLGATE_RECEIPT_KEYS": settings.RECEIPT_KEYS,
            "ALLOWED_HOSTS": "127.0.0.1",
            "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{control_port}",
            "TOLLGATE_PUBLIC_URL": f"http://127.0.0.1:{control_port}",
            # No TLS proxy in this test: the plain-http trial values .env.example names.
            "TOLLGATE_BEHIND_TLS_PROXY": "false",
            "TOLLGATE_SSL_REDIRECT": "false",
            "TOLLGATE_HSTS_SECONDS": "0",
            "TOLLGATE_SECURE_COOKIES": "false",
            "TOLLGATE_PROXY_HOPS": "0",
            "TOLLGATE_VAR_DIR": str(tmp_path / "var"),
            "TOLLGATE_BEAT_SCHEDULE": str(tmp_path / "var" / "celerybeat-schedule"),
            "PROVIDER_PROFILES_JSON": str(checkout / "profiles.json"),
            "OPENAI_API_KEY": PLATFORM_KEY,
            "GATEWAY_BIND": f"127.0.0.1:{gateway_port}",
            "CONTROL_BIND": f"127.0.0.1:{control_port}",
            "GATEWAY_WORKERS": "2",
            "CONTROL_WORKERS": "1",
            "TOLLGATE_REPLICAS": "2",
            # The reaper runs every min(60 s, the hold TTL): seconds, for the test.
            "TOLLGATE_REQUEST_DEADLINE_S": "2",
            "TOLLGATE_RESERVATION_TTL_S": "2",
        },
    )
    run.gateway = f"http://127.0.0.1:{gateway_port}"
    run.control = f"http://127.0.0.1:{control_port}"
    yield run
    if run.honcho is not None and run.honcho.poll() is None:
        run.stop()  # honcho starts each process in a session of its own: it stops them


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_an_operator_deploys_with_the_procfile_and_serves_both_key_kinds(
    transactional_db, stub, operator
):
    import openai

    from usage.models import UsageLog

    stub.clear()  # the session's stub: only this test's calls from here on
    operator.sh(ACTIVATE, MIGRATE, GRANT, SUPERUSER, LOAD_PROFILES)
    tenant = json.loads(operator.sh(ACTIVATE, CREATE_TENANT))
    operator.start()
    wait_until(
        lambda: operator.running() and answers(operator.gateway) and answers(operator.control),
        timeout_s=60,
        interval_s=0.2,
        what="both planes' /healthz",
    )
    assert httpx.get(f"{operator.control}/healthz").json() == {"status": "ok", "plane": "control"}

    # A streamed completion with the official SDK, served on the platform key from .env.
    client = openai.OpenAI(
        base_url=f"{operator.gateway}/v1", api_key=tenant["api_key"], max_retries=0
    )
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "three words here"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "gpt-4o-mini" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 8)
    assert stub.vendor_calls()[-1]["key"] == PLATFORM_KEY

    # Each plane refuses the other's routes in the one error language.
    wrong = httpx.get(f"{operator.gateway}/login/")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (404, "LM-2004")
    assert httpx.get(f"{operator.control}/v1/models").status_code == 404

    # The operator signs into the admin; the owner sets a password through the printed link.
    admin = Browser(operator.control)
    signed_in = admin.submit(
        "/django-admin/login/?next=/django-admin/", {"username": "ops", "password": OPS_PASSWORD}
    )
    assert (signed_in.status_code, signed_in.headers["location"]) == (302, "/django-admin/")
    assert tenant["password_link"].startswith(f"{operator.control}/set-password/")
    owner = Browser(operator.control)
    link = owner.request("GET", tenant["password_link"].removeprefix(operator.control))
    assert link.status_code == 302
    new_password = {"new_password1": OWNER_PASSWORD, "new_password2": OWNER_PASSWORD}
    assert owner.submit(link.headers["location"], new_password).status_code == 302
    owner.submit("/login/", {"username": tenant["username"], "password": OWNER_PASSWORD})
    assert 'id="wallet-balance"' in owner.request("GET", "/dashboard/", follow_redirects=True).text

    # The tenant adds a team key with curl, as docs/providers.md shows.
    api_env = {
        "TG_URL": operator.control,
        "GROUP_ID": str(tenant["group_id"]),
        "TG_API_TOKEN": tenant["api_token"],
        "OPENAI_TEAM_KEY": TEAM_KEY,
        "OPENAI_BASE_URL": f"{operator.gateway}/v1",
        "TG_KEY": tenant["api_key"],
    }
    added = json.loads(operator.sh(ADD_TEAM_KEY, **api_env))
    assert (added.get("label"), added.get("last4"), added.get("status")) == (
        "prod",
        "0042",
        "active",
    ), added
    ask = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "on the team key"}]}

    def served_by_team_key() -> bool:
        client.chat.completions.create(**ask)
        return stub.vendor_calls()[-1]["key"] == TEAM_KEY

    # Each gateway worker reloads its pools when the bus tells it (an add does not wait for
    # that; a removal does): within moments, then on every request.
    wait_until(served_by_team_key, timeout_s=10, interval_s=0.1, what="the team key serving")
    for _ in range(4):
        assert served_by_team_key()
    assert json.loads(operator.sh(FALLBACK_ON, **api_env))["fallback"] is True
    models = json.loads(operator.sh(LIST_MODELS, **api_env))
    assert "gpt-4o-mini" in [model["id"] for model in models["data"]]

    def all_rows() -> list:
        rows = UsageLog.objects.filter(api_key_id=tenant["api_key_id"]).order_by("created_at")
        return list(rows) if rows.count() == len(stub.vendor_calls()) else []

    # The processes serve as the application's role, which may not rewrite the proof.
    from django.db import connection

    def app_sessions() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND datname = %s",
                [APP_ROLE, connection.settings_dict["NAME"]],
            )
            return cursor.fetchone()[0]

    wait_until(lambda: app_sessions() > 0, what="the processes' sessions as the app's role")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT has_table_privilege(%s, 'billing_receipt', 'UPDATE'),"
            " has_table_privilege(%s, 'billing_receipt', 'INSERT')",
            [APP_ROLE, APP_ROLE],
        )
        assert cursor.fetchone() == (False, True)

    rows = wait_until(all_rows, timeout_s=15, what="a usage row for every vendor call")
    # Team-served tokens are counted apart: the tenant's vendor bills them, not Tollgate.
    tokens = [(r.tokens_in, r.tokens_out, r.byok_tokens_in, r.byok_tokens_out) for r in rows]
    assert (tokens[0], rows[0].served_by) == ((3, 8, 0, 0), "platform")
    assert [r.served_by for r in rows[-5:]] == ["team"] * 5
    assert tokens[-5:] == [(0, 0, 4, 8)] * 5

    wait_until(
        lambda: (
            operator.running()
            and re.search(r"Task billing\.expire_stale_holds\[[^\]]+\] succeeded", operator.log())
        ),
        timeout_s=60,
        interval_s=0.25,
        what="beat's reaper run by the worker",
    )

    operator.stop()
    assert not answers(operator.gateway) and not answers(operator.control)
    for process in ("gateway", "control", "worker", "beat"):
        assert re.search(rf"{process}\.1 +\| ", operator.log()), process
