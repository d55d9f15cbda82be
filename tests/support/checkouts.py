"""A copy of the checkout to run `make run` / `make stop` in, as a newcomer would.

Each copy has its own var/, so a developer's `make run` in the real checkout is left alone,
and the test's Python environment is active in it (`make` need not run pip).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import ROOT, child_env, free_port


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie has exited; only its parent reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def copy_checkout(where: Path) -> Path:
    """Copy the checkout's files (tracked and not ignored) to `where`/checkout; return it."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc to tell a live process from a zombie")
    copy = where / "checkout"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    (copy / "var").mkdir()
    (copy / "var/.installed").touch()
    return copy


@pytest.fixture
def checkout(tmp_path: Path):
    copy = copy_checkout(tmp_path)
    yield copy
    subprocess.run(["scripts/stop.sh"], cwd=copy, env=make_env(), capture_output=True)


@pytest.fixture(scope="module")
def module_checkout(tmp_path_factory):
    """A checkout for one test module's tests, which share what they start in it."""
    copy = copy_checkout(tmp_path_factory.mktemp("module-checkout"))
    yield copy
    subprocess.run(["scripts/stop.sh"], cwd=copy, env=make_env(), capture_output=True)


def make_env(**extra: str) -> dict[str, str]:
    env = child_env(**extra)
    for name in ("SECRET_KEY", "SEALING_KEYS", "TOLLGATE_RECEIPT_KEYS", "TEST_REQUIRE_SERVICES"):
        env.pop(name, None)
    env["VIRTUAL_ENV"] = sys.prefix
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def make(checkout: Path, target: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", target],
        cwd=checkout,
        env=make_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass(frozen=True)
class MadeRun:
    """What `make run` printed: where it serves and the demo's fresh credentials."""

    url: str
    stub_url: str
    api_key: str
    api_token: str
    owner: tuple[str, str]  # dashboard username, password
    operator: tuple[str, str]  # Django admin username, password
    printed: str  # all of it


def make_run(checkout: Path, **env: str) -> MadeRun:
    """`make run` on free ports; what it printed, parsed."""
    port, stub_port = free_port(), free_port()
    run = make(checkout, "run", PORT=str(port), STUB_PORT=str(stub_port), **env)
    assert run.returncode == 0, run.stderr
    out = run.stdout

    def found(pattern: str) -> re.Match:
        match = re.search(pattern, out)
        assert match, f"{pattern!r} not in make run's output:\n{out}"
        return match

    return MadeRun(
        url=f"http://127.0.0.1:{port}",
        stub_url=f"http://127.0.0.1:{stub_port}",
        api_key=found(r"export OPENAI_API_KEY=(\S+)")[1],
        api_token=found(r"Authorization: Token (\S+)'")[1],
        owner=found(r"Tenant dashboard \(demo owner\): \S+ user (\S+) password (\S+)").groups(),
        operator=found(r"Django admin \(operators\): \S+ user (\S+) password (\S+)").groups(),
        printed=out,
    )
