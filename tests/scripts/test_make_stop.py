"""`make stop` stops what `make run` started from any shell, and says what it did.

Each test works in a copy of the checkout (its own var/, so a developer's `make run` in the
real one is left alone) with the test's Python environment active.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


@pytest.fixture
def checkout(tmp_path: Path):
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc to tell a live process from a zombie")
    copy = tmp_path / "checkout"
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
    # The environment is installed already: `make` need not run pip.
    (copy / "var").mkdir()
    (copy / "var/.installed").touch()
    yield copy
    subprocess.run(["scripts/stop.sh"], cwd=copy, env=make_env(), capture_output=True)


def make_env(**extra: str) -> dict[str, str]:
    env = child_env(**extra)
    for name in ("SECRET_KEY", "SEALING_KEYS", "TEST_REQUIRE_SERVICES"):
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


def test_stop_from_a_shell_with_another_var_dir_stops_the_run(checkout, tmp_path):
    run_var = tmp_path / "run-var"
    run = make(
        checkout,
        "run",
        TOLLGATE_VAR_DIR=str(run_var),
        PORT=str(free_port()),
        STUB_PORT=str(free_port()),
    )
    assert run.returncode == 0, run.stderr
    record = dict(
        line.split("=", 1) for line in (checkout / "var/make-run").read_text().splitlines()
    )
    pids = {name: int(record[name]) for name in ("gateway", "worker", "stub")}
    assert record["var_dir"] == str(run_var.resolve())
    assert all(running(pid) for pid in pids.values())

    stop = make(checkout, "stop", TOLLGATE_VAR_DIR=str(tmp_path / "another-var"))

    assert (stop.returncode, stop.stderr) == (0, "")
    assert stop.stdout == (
        f"make stop: stopped gateway (pid {pids['gateway']}), worker (pid {pids['worker']}),"
        f" stub (pid {pids['stub']}) of the make run in {run_var.resolve()}\n"
    )
    assert not any(running(pid) for pid in pids.values())
    assert not (checkout / "var/make-run").exists()
    assert sorted(p.name for p in run_var.glob("*.pid")) == []

    again = make(checkout, "stop")

    assert (again.returncode, again.stdout) == (
        0,
        "nothing to stop: no make run found running (looked in var/make-run and var/*.pid)\n",
    )


def test_stop_with_nothing_started_says_so(checkout, tmp_path):
    stop = make(checkout, "stop", TOLLGATE_VAR_DIR=str(tmp_path / "empty"))

    assert (stop.returncode, stop.stderr) == (0, "")
    assert stop.stdout == (
        "nothing to stop: no make run found running (looked in var/make-run and "
        f"{tmp_path / 'empty'}/*.pid)\n"
    )


def test_a_stale_pid_now_another_process_is_left_alone(checkout, tmp_path):
    other = subprocess.Popen(["sleep", "60"])
    try:
        (checkout / "var/make-run").write_text(f"var_dir={tmp_path}\ngateway={other.pid}\n")
        (tmp_path / "worker.pid").write_text("999999999\n")  # long gone

        stop = make(checkout, "stop", TOLLGATE_VAR_DIR=str(tmp_path))

        assert stop.returncode == 0
        assert stop.stdout.splitlines() == [
            f"make stop: pid {other.pid} (the gateway of the make run in {tmp_path}) is now"
            " another process; left it alone",
            "nothing to stop: no make run found running (looked in var/make-run and "
            f"{tmp_path}/*.pid)",
        ]
        assert other.poll() is None
        assert not (checkout / "var/make-run").exists()
        assert not (tmp_path / "worker.pid").exists()
    finally:
        other.kill()
        other.wait()


def test_a_gateway_of_another_checkout_is_left_alone(checkout, tmp_path):
    # Same command line as make run's gateway, another working directory.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m uvicorn config.asgi:application"],
        cwd=elsewhere,
    )
    try:
        (checkout / "var/make-run").write_text(f"var_dir={tmp_path}\ngateway={other.pid}\n")

        stop = make(checkout, "stop", TOLLGATE_VAR_DIR=str(tmp_path))

        assert stop.returncode == 0
        assert stop.stdout.splitlines()[0] == (
            f"make stop: pid {other.pid} (the gateway of the make run in {tmp_path}) is now"
            " another process; left it alone"
        )
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
