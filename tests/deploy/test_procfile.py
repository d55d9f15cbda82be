"""The Procfile, run as an operator runs it on a host without containers: `honcho start` on
PostgreSQL and a Redis with an append-only file, each plane on its own port, the Celery
worker and beat beside them. Driven from outside: a streamed completion with the official
SDK through the gateway, a dashboard sign-in on the control plane, beat's reaper run by the
worker, and a clean stop of every process on SIGTERM."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from accounts.models import Membership
from tests.support.processes import (
    ROOT,
    RedisServer,
    child_database_url,
    child_env,
    free_port,
)
from tests.support.profiles import install_profiles
from tests.support.services import requires_postgres, requires_redis
from tests.support.tenants import make_tenant
from tests.support.waits import wait_until

pytestmark = [requires_postgres, requires_redis]

PASSWORD = "a-long-enough-password-for-tests"


@pytest.fixture
def aof_redis(tmp_path):
    server = RedisServer(port=free_port(), aof_dir=tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def honcho(tmp_path, aof_redis):
    gateway_port, control_port = free_port(), free_port()
    env = child_env(
        DATABASE_URL=child_database_url(),
        REDIS_URL=aof_redis.url,
        SECRET_KEY=settings.SECRET_KEY,
        SEALING_KEYS=settings.SEALING_KEYS,
        TOLLGATE_VAR_DIR=str(tmp_path / "var"),
        GATEWAY_BIND=f"127.0.0.1:{gateway_port}",
        CONTROL_BIND=f"127.0.0.1:{control_port}",
        GATEWAY_WORKERS="2",
        CONTROL_WORKERS="1",
        # This Redis keeps an append-only file: the production check runs and passes.
        TOLLGATE_REDIS_PERSISTENCE="check",
        # The reaper's period is min(60 s, the hold TTL): seconds, for the test.
        TOLLGATE_REQUEST_DEADLINE_S="2",
        TOLLGATE_RESERVATION_TTL_S="2",
        # The Procfile's commands from the dev venv, as `honcho start` from an activated one.
        PATH=f"{ROOT / '.venv' / 'bin'}:{sys.prefix}/bin:/usr/bin:/bin",
    )
    log_path = tmp_path / "honcho.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [shutil.which("honcho", path=env["PATH"]), "start", "-f", "Procfile"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    run = type("Run", (), {})()
    run.proc, run.log = proc, lambda: log_path.read_text(errors="replace")
    run.gateway, run.control = (
        f"http://127.0.0.1:{gateway_port}",
        f"http://127.0.0.1:{control_port}",
    )
    yield run
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            subprocess.run(["kill", "-9", f"-{proc.pid}"], check=False)


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_procfile_serves_both_planes_and_runs_the_schedule(transactional_db, stub, honcho):
    import openai

    install_profiles(stub.url)
    tenant = make_tenant(wallet_micro=5_000_000)
    owner = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    owner.set_password(PASSWORD)
    owner.save()

    def both_up() -> bool:
        assert honcho.proc.poll() is None, honcho.log()[-3000:]
        return answers(honcho.gateway) and answers(honcho.control)

    wait_until(both_up, timeout_s=60, interval_s=0.2, what="both planes' /healthz")
    assert httpx.get(f"{honcho.control}/healthz").json() == {"status": "ok", "plane": "control"}

    client = openai.OpenAI(base_url=f"{honcho.gateway}/v1", api_key=tenant.api_key, max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "three words here"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "gpt-4o-mini" in text
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 8)

    from usage.models import UsageLog

    row = wait_until(
        lambda: UsageLog.objects.filter(api_key_id=tenant.api_key_id).first(),
        timeout_s=15,
        what="the usage row",
    )
    assert (row.tokens_in, row.tokens_out, row.served_by) == (3, 8, "platform")

    # The gateway serves no pages; the control plane serves no model routes.
    wrong = httpx.get(f"{honcho.gateway}/login/")
    assert wrong.status_code == 404 and wrong.json()["error"]["code"] == "LM-2004"
    assert httpx.get(f"{honcho.control}/v1/models").status_code == 404

    with httpx.Client(base_url=honcho.control) as browser:
        form = browser.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        signed_in = browser.post(
            "/login/",
            data={"csrfmiddlewaretoken": token, "username": owner.username, "password": PASSWORD},
            follow_redirects=True,
        )
        assert signed_in.status_code == 200
        assert 'id="wallet-balance"' in signed_in.text

    def reaper_ran() -> bool:
        assert honcho.proc.poll() is None, honcho.log()[-3000:]
        return re.search(r"Task billing\.expire_stale_holds\[[^\]]+\] succeeded", honcho.log())

    wait_until(reaper_ran, timeout_s=60, interval_s=0.25, what="beat's reaper run by the worker")
    assert get_user_model().objects.filter(pk=owner.pk, last_login__isnull=False).exists()

    honcho.proc.send_signal(signal.SIGTERM)
    assert honcho.proc.wait(40) == 0 or honcho.proc.returncode in (-signal.SIGTERM, 143)
    assert not answers(honcho.gateway) and not answers(honcho.control)
