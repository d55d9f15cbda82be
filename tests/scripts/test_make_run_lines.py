"""What `make run` prints is right for the port it runs on: every address it names is the
run's (gateway or stub), and the management command it prints, run as printed in another
shell, gives a set-password link on that port."""

from __future__ import annotations

import json
import re
import subprocess

from tests.support.checkouts import make_env, make_run


def test_the_printed_lines_name_the_runs_port(checkout):
    run = make_run(checkout)
    ports = {run.url.rsplit(":", 1)[1], run.stub_url.rsplit(":", 1)[1]}

    named = set(re.findall(r"(?:127\.0\.0\.1|localhost):(\d+)", run.printed))
    assert named == ports, run.printed

    [command] = [line for line in run.printed.splitlines() if "manage.py create_tenant" in line]
    # A new shell: none of the run's environment, as a reader who copies the line has.
    made = subprocess.run(
        ["bash", "-c", command], env=make_env(), capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["password_link"].startswith(f"{run.url}/set-password/")
    assert "TOLLGATE_PUBLIC_URL is not set" not in made.stderr
