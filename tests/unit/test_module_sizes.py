"""No product module is over 500 lines (issue 44): past that a module holds more than one idea.

Product is every .py file the image ships: what .dockerignore leaves out (tests, bench, docs,
scripts, deploy, local state) is not, nor are migrations (generated, and never edited).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.processes import ROOT

MAX_LINES = 500


def left_out_of_the_image() -> set[str]:
    """Return the top-level names .dockerignore leaves out (its plain entries, no globs)."""
    names = set()
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        entry = line.strip().strip("/")
        if entry and not entry.startswith("#") and not set(entry) & set("*?[/!"):
            names.add(entry)
    return names


def product_files() -> list[Path]:
    left_out = left_out_of_the_image()
    found = []
    for top in sorted(ROOT.iterdir()):
        # Skipped before walking: .venv and var/ hold far more files than the product.
        if top.name in left_out or top.name.startswith("."):
            continue
        paths = [top] if top.suffix == ".py" else top.rglob("*.py") if top.is_dir() else []
        found += [path for path in paths if "migrations" not in path.relative_to(ROOT).parts]
    return sorted(found)


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_product_files_are_found():
    names = {path.relative_to(ROOT).as_posix() for path in product_files()}
    assert {"manage.py", "config/settings.py", "stubvendor/server.py"} <= names
    assert not any(name.startswith(("tests/", "bench/")) for name in names)
    assert not any("/migrations/" in name for name in names)


def test_no_product_file_is_over_500_lines():
    over = [
        f"{path.relative_to(ROOT).as_posix()}: {count} lines"
        for path in product_files()
        if (count := line_count(path)) > MAX_LINES
    ]
    assert over == [], f"Over {MAX_LINES} lines (split by concept): " + "; ".join(over)
