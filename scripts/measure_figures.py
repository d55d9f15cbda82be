#!/usr/bin/env python3
"""Measure the sizes and times the docs quote, and write them into the docs.

A figure in README.md or docs/*.md is written between markers, never typed:

    a <!-- figure: venv_mb -->280<!-- /figure --> MB virtualenv

`python3 scripts/measure_figures.py` measures every figure it can on this machine and rewrites
the marked values (a figure it cannot measure here, e.g. the image without podman, is left as
it is and named); `--check` measures nothing and fails on a marker naming no figure or a size
in MB written outside markers (tests/docs/test_figures.py runs it). Sizes are decimal MB
(10^6 bytes, as podman prints them) of disk usage; times are wall-clock seconds.

The figures:
- make_run_s, venv_mb: a cold `make run` in a fresh clone of HEAD (no .venv, pip's cache
  warm): its time and its virtualenv's size;
- dev_venv_mb: that virtualenv once `make install-dev` added the test and lint tools;
- image_mb, image_venv_mb, image_app_mb: the container image (default localhost/tollgate:ci,
  what tests/deploy/test_compose.py builds), its virtualenv and its /app;
- peer_venv_mb: LiteLLM's proxy's virtualenv, var/peer-venv, once `make bench-peer` made it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKED = re.compile(r"<!-- figure: (\w+) -->([^<]*)<!-- /figure -->")
# A size a reader may take for a measurement: N MB (not MiB, a unit of limits here).
SIZE = re.compile(r"\b\d[\d.,–-]* ?MB\b")
# Sizes that are not measurements of this project, each with why.
NOT_FIGURES = {
    "at most 5 MB": "a limit of the web fetcher (docs/development.md), not a measurement",
    "| 74 s, 969 MB |": "the scale bench's before/after table (bench/SCALE.md keeps its runs)",
}


def disk_mb(path: Path) -> int:
    used = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True)
    return round(int(used.stdout.split()[0]) / 1e6)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env() -> dict[str, str]:
    """A newcomer's shell: no virtualenv active, no Tollgate settings (pip's kept)."""
    venv = os.environ.get("VIRTUAL_ENV")
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not venv or not p.startswith(venv)]
    dropped = ("VIRTUAL_ENV", "DATABASE_URL", "REDIS_URL", "SECRET_KEY", "SEALING_KEYS")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in dropped and not k.startswith(("TOLLGATE_", "GATEWAY_", "TEST_"))
    }
    return env | {"PATH": os.pathsep.join(path)}


def cold_make_run() -> dict[str, float]:
    """A fresh clone of HEAD, `make run` timed, then `make install-dev`; sizes of its .venv."""
    with tempfile.TemporaryDirectory(prefix="tollgate-figures-") as tmp:
        clone = Path(tmp) / "tollgate"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = clean_env() | {"PORT": str(free_port()), "STUB_PORT": str(free_port())}

        def make(target: str) -> None:
            done = subprocess.run(["make", "-s", target], cwd=clone, env=env, capture_output=True)
            if done.returncode:
                sys.exit(f"make {target} failed:\n{done.stdout.decode()}{done.stderr.decode()}")

        started = time.monotonic()
        try:
            make("run")
            took = time.monotonic() - started
        finally:
            subprocess.run(["make", "-s", "stop"], cwd=clone, env=env, capture_output=True)
        figures = {"make_run_s": round(took, 1), "venv_mb": disk_mb(clone / ".venv")}
        make("install-dev")
        return figures | {"dev_venv_mb": disk_mb(clone / ".venv")}


def image(name: str) -> dict[str, float]:
    """The image's size (podman's), and its virtualenv's and /app's inside it."""
    if shutil.which("podman") is None:
        return {}
    size = subprocess.run(
        ["podman", "image", "inspect", name, "--format", "{{.Size}}"],
        capture_output=True,
        text=True,
    )
    if size.returncode:
        return {}
    # This machine's podman settings (scripts/deploy-prereqs.sh), unless the caller has its own.
    conf = ROOT / "deploy" / "test-images" / "containers.conf"
    env = {"CONTAINERS_CONF": str(conf)} if conf.is_file() else {}
    inside = subprocess.run(
        ["podman", "run", "--rm", "--entrypoint", "du", name, "-s", "-B1", "/opt/venv", "/app"],
        capture_output=True,
        text=True,
        env=env | os.environ,
    )
    figures: dict[str, float] = {"image_mb": round(int(size.stdout) / 1e6)}
    if inside.returncode:
        print(f"podman run {name} failed, its venv and app not measured:\n{inside.stderr}")
        return figures
    venv_bytes, _, app_bytes, _ = inside.stdout.split()
    return figures | {
        "image_venv_mb": round(int(venv_bytes) / 1e6),
        "image_app_mb": round(int(app_bytes) / 1e6),
    }


def peer_venv() -> dict[str, float]:
    venv = ROOT / "var" / "peer-venv"
    return {"peer_venv_mb": disk_mb(venv)} if venv.is_dir() else {}


FIGURES: dict[str, str] = {
    "make_run_s": "cold make run",
    "venv_mb": "cold make run",
    "dev_venv_mb": "cold make run",
    "image_mb": "image",
    "image_venv_mb": "image",
    "image_app_mb": "image",
    "peer_venv_mb": "peer venv",
}


def marked(text: str) -> list[tuple[str, str]]:
    return MARKED.findall(text)


def unmarked_sizes(doc: Path) -> list[str]:
    """Lines of `doc` with a size in MB outside the figure markers (and not a known limit)."""
    found = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        bare = MARKED.sub("", line)
        for allowed in NOT_FIGURES:
            bare = bare.replace(allowed, "")
        if SIZE.search(bare):
            found.append(f"{doc.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def check() -> list[str]:
    """What is wrong with the docs' figures: unknown names, sizes typed outside markers."""
    problems = []
    for doc in DOCS:
        for name, _ in marked(doc.read_text()):
            if name not in FIGURES:
                problems.append(f"{doc.relative_to(ROOT)}: no figure named {name!r}")
        problems += [f"{line} (a size outside figure markers)" for line in unmarked_sizes(doc)]
    return problems


def rewrite(values: dict[str, float]) -> list[str]:
    """Write `values` into the docs' markers; return the docs changed."""
    changed = []
    for doc in DOCS:
        text = doc.read_text()
        new = MARKED.sub(
            lambda m: (
                f"<!-- figure: {m[1]} -->{values[m[1]]:g}<!-- /figure -->"
                if m[1] in values
                else m[0]
            ),
            text,
        )
        if new != text:
            doc.write_text(new)
            changed.append(str(doc.relative_to(ROOT)))
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="measure nothing; check the markers")
    parser.add_argument("--image", default="localhost/tollgate:ci", help="the image to measure")
    parser.add_argument(
        "--skip-make-run", action="store_true", help="leave its figures as they are"
    )
    args = parser.parse_args()
    problems = check()
    if args.check or problems:
        print("\n".join(problems) or "figures: every size in the docs is marked and known")
        sys.exit(1 if problems else 0)
    measures: list[Callable[[], dict[str, float]]] = [lambda: image(args.image), peer_venv]
    if not args.skip_make_run:
        measures.insert(0, cold_make_run)
    values: dict[str, float] = {}
    for measure in measures:
        values |= measure()
    # Times depend on what else the machine runs: say so beside them.
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name in FIGURES:
        print(f"{name}: {values[name]}" if name in values else f"{name}: not measured here")
    print("rewrote:", ", ".join(rewrite(values)) or "nothing")


if __name__ == "__main__":
    main()
