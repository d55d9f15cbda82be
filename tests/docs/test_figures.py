"""The docs' sizes and times are measured by scripts/measure_figures.py, never typed: every
size in MB in README.md and docs/ sits between figure markers that name a figure the script
measures, and the script rewrites exactly those values."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from tests.support.processes import ROOT

SCRIPT = ROOT / "scripts" / "measure_figures.py"


def load_script():
    spec = importlib.util.spec_from_file_location("measure_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_mode_passes_on_the_docs():
    checked = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60
    )
    assert (checked.returncode, checked.stdout) == (
        0,
        "figures: every size in the docs is marked and known\n",
    ), checked.stdout + checked.stderr


def test_every_figure_the_script_measures_is_in_the_docs():
    figures = load_script()
    named = {name for doc in figures.DOCS for name, _ in figures.marked(doc.read_text())}
    assert named == set(figures.FIGURES)


def test_a_typed_size_fails_the_check_and_marked_ones_are_rewritten(tmp_path, monkeypatch):
    figures = load_script()
    doc = tmp_path / "doc.md"
    doc.write_text(
        "a <!-- figure: venv_mb -->280<!-- /figure --> MB venv in"
        " <!-- figure: make_run_s -->36.2<!-- /figure --> s;\nan image of 417 MB,"
        " fetched pages at most 5 MB\n<!-- figure: venv_size -->1<!-- /figure -->\n"
    )
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    monkeypatch.setattr(figures, "DOCS", [doc])

    assert figures.check() == [
        "doc.md: no figure named 'venv_size'",
        "doc.md:2: an image of 417 MB, fetched pages at most 5 MB (a size outside figure markers)",
    ]
    assert figures.rewrite({"venv_mb": 301, "make_run_s": 40.5, "image_mb": 450}) == ["doc.md"]
    assert doc.read_text().splitlines()[0] == (
        "a <!-- figure: venv_mb -->301<!-- /figure --> MB venv in"
        " <!-- figure: make_run_s -->40.5<!-- /figure --> s;"
    )
