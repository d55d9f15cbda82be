"""bench/trace_cost.py, as docs/benchmarks.md runs it, at a tiny size: every mode prints its
least and median CPU per request, and the 100 % split counts the five spans a request makes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODE = re.compile(
    r"^ *(off|1%|100%): (\d+\.\d{4}) ms CPU per request at the least, "
    r"(\d+\.\d{4}) ms the median \(3 rounds of 200\)$"
)


def test_the_trace_cost_bench_prints_each_mode_and_the_split(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/trace_cost.py", "--n", "200", "--repeat", "3"],
        cwd=ROOT,
        env={**os.environ, "TOLLGATE_VAR_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    modes = [MODE.match(line) for line in lines[:3]]
    assert [m.group(1) for m in modes if m] == ["off", "1%", "100%"], done.stdout
    for m in modes:
        assert m is not None and 0 < float(m.group(2)) <= float(m.group(3))
    assert re.fullmatch(
        r"100% split: \d+\.\d{4} ms on the request's thread \(hooks, spans built\), "
        r"\d+\.\d{4} ms encoding on the export thread, per request \(5 spans each\)",
        lines[3],
    ), done.stdout
