"""bench/run.py run by a test as a user runs it, its JSON report read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT


def bench_report(args: list[str], out: Path, *, timeout_s: float) -> dict:
    """Run `python bench/run.py ARGS --json OUT`; return its report, with the run's exit code
    (`exit_code`), its whole stdout (`stdout`) and the tails of both streams (`output`)."""
    done = subprocess.run(
        [sys.executable, "bench/run.py", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert out.exists(), (
        f"no report ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    doc = json.loads(out.read_text())
    doc["exit_code"] = done.returncode
    doc["stdout"] = done.stdout
    doc["output"] = done.stdout[-3000:] + done.stderr[-3000:]
    return doc
