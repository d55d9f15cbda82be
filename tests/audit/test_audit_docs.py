"""docs/tenant-api.md's audit trail commands, verbatim, against a running gateway: a tenant
downloads its trail as JSON lines with curl and verifies the chain offline; an operator
verifies every stored chain. A removed line is reported as such."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from tests.support.processes import child_database_url, child_env
from tests.support.stacks import Stack

ROOT = Path(__file__).resolve().parent.parent.parent

# docs/tenant-api.md, "Audit trail", verbatim.
EXPORT = (
    'curl -sS "$TG_URL/api/audit/export.jsonl" -H "Authorization: Token $TG_API_TOKEN" '
    "-o audit.jsonl"
)
VERIFY_EXPORT = "python manage.py verify_audit --jsonl audit.jsonl"
VERIFY_STORED = "python manage.py verify_audit"


def shell(cwd: Path, *commands: str, **env: str) -> subprocess.CompletedProcess:
    """Run documented commands in a shell in `cwd`, where `manage.py` is the checkout's."""
    (cwd / "manage.py").write_text((ROOT / "manage.py").read_text())
    environment = child_env(
        DATABASE_URL=child_database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        SEALING_KEYS=settings.SEALING_KEYS,
        PYTHONPATH=str(ROOT),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **env,
    )
    return subprocess.run(
        ["bash", "-c", "set -e\n" + "\n".join(commands)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_tenant_exports_and_verifies_its_trail_and_an_operator_every_chain(
    stack: Stack, tmp_path
):
    tenant = stack.tenant()
    env = {"TG_URL": stack.url, "TG_API_TOKEN": tenant.api_token}

    done = shell(tmp_path, EXPORT, VERIFY_EXPORT, **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"account {tenant.account_id}: 6 entries, intact",
        "1 chain(s) intact.",
    ]

    stored = shell(tmp_path, VERIFY_STORED)
    assert stored.returncode == 0, stored.stderr
    assert f"account {tenant.account_id}: 6 entries, intact" in stored.stdout.splitlines()

    export = tmp_path / "audit.jsonl"
    lines = export.read_text().splitlines()
    export.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # newest first: seq 4 gone
    broken = shell(tmp_path, VERIFY_EXPORT)
    assert broken.returncode == 1
    assert broken.stdout.splitlines() == [
        f"account {tenant.account_id}: BROKEN after 3 entries: seq 5: expected seq 4 (missing)"
    ]
    assert "1 chain(s) broken." in broken.stderr
