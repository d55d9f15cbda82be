"""`make stop` stops what `make run` started from any shell, and says what it did.

Each test works in a copy of the checkout (its own var/, so a developer's `make run` in the
real one is left alone) with the test's Python environment active.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.checkouts import make, running
from tests.support.processes import free_port


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
