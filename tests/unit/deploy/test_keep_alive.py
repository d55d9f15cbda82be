"""The gateway keeps an idle client connection open longer than the official SDKs reuse one.

If the server closes first, a request the SDK sends into the closing connection fails with
"Server disconnected without sending a response" (with `max_retries=0`, straight to the
caller; otherwise as a wasted retry). Gunicorn reads gunicorn.conf.py from its working
directory, which is the repository under the Procfile and /app in the image.
"""

from __future__ import annotations

import anthropic
import openai
import pytest
from gunicorn.app.base import Application
from gunicorn.config import get_default_config_file

from tests.support.processes import ROOT


class ConfigProbe(Application):
    """Gunicorn's configuration as `gunicorn` run in the repository loads it."""

    def load_config(self) -> None:
        path = get_default_config_file()
        assert path, "no gunicorn.conf.py in the repository"
        self.load_config_from_file(path)

    def load(self) -> None:  # pragma: no cover - never served
        raise NotImplementedError


def sdk_idle_expiry_s(client) -> float:
    return client._transport._pool._keepalive_expiry


@pytest.fixture
def keepalive_s(monkeypatch) -> int:
    monkeypatch.chdir(ROOT)
    return ConfigProbe().cfg.keepalive


def test_gunicorn_outlasts_the_sdks_idle_connections(keepalive_s):
    expiries = {
        sdk_idle_expiry_s(openai.DefaultHttpxClient()),
        sdk_idle_expiry_s(anthropic.DefaultHttpxClient()),
    }
    assert expiries == {5.0}
    assert keepalive_s > max(expiries)
    # A balancer in front (60 s on the common clouds) must close before we do too.
    assert keepalive_s == 75


def test_make_run_keeps_the_same_keep_alive_on_plain_uvicorn(keepalive_s):
    assert f"--timeout-keep-alive {keepalive_s} " in (ROOT / "scripts/run.sh").read_text()
