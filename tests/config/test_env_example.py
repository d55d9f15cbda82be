"""`.env.example` lists every setting, and its production values pass Django's deploy checks."""

from __future__ import annotations

import base64
import re
import secrets
import subprocess
import sys
from pathlib import Path

from config.settings_environment import OUR_PREFIXES, SCHEME
from tests.support.processes import ROOT

ENV_EXAMPLE = ROOT / ".env.example"
# docs/production.md, "TLS and a reverse proxy", verbatim.
DEPLOY_CHECK = "python manage.py check --deploy --fail-level WARNING"
SETTING_LINE = re.compile(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$")


def example_lines() -> list[tuple[str, str, bool]]:
    """Return (name, value, active) for each `NAME=value` line, commented out or not."""
    lines = []
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = SETTING_LINE.match(line)
        if match:
            lines.append((match.group(1), match.group(2), not line.startswith("#")))
    return lines


def production_env(**overrides: str) -> dict[str, str]:
    """The example's active values, its `change-me` secrets replaced as an operator would."""
    made = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "SEALING_KEYS": "v1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "TOLLGATE_CALLER_KEY": secrets.token_urlsafe(32),
        "TOLLGATE_RECEIPT_KEYS": "r1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    }
    # `python` is this virtualenv's, as in an operator's activated one.
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    for name, value, active in example_lines():
        if active:
            env[name] = made.get(name, value)
    return env | overrides


def test_every_setting_is_listed_once_with_a_comment():
    names = [name for name, _, _ in example_lines()]
    ours = {name for name in names if name.startswith(OUR_PREFIXES)}
    assert sorted(set(SCHEME) - set(names)) == []
    assert sorted(ours - set(SCHEME)) == []
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
    text = ENV_EXAMPLE.read_text().splitlines()
    for index, line in enumerate(text):
        if SETTING_LINE.match(line) and not line.startswith("#"):
            assert text[index - 1].startswith("#"), f"{line!r} has no comment above it"


def run_deploy_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", DEPLOY_CHECK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_documented_production_settings_pass_check_deploy(tmp_path):
    result = run_deploy_check(production_env(TOLLGATE_VAR_DIR=str(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_fails_on_plain_cookies_and_no_hsts(tmp_path):
    env = production_env(
        TOLLGATE_VAR_DIR=str(tmp_path), TOLLGATE_SECURE_COOKIES="false", TOLLGATE_HSTS_SECONDS="0"
    )
    result = run_deploy_check(env)
    assert result.returncode == 1
    for warning in ("security.W004", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout
