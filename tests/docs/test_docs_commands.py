"""A doc that lies is a bug: every shell block in the README and docs/ names, in the line above
it, the test or CI file that runs it (`<!-- tested by: FILE ... -->`), and each of its commands
is in one of those files verbatim (a Python test's string constants, evaluated; any other
file's text), so a command changed in one place and not the other fails here. A block no test
can run says why instead (`<!-- run by hand: REASON -->`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCE = re.compile(r"^```(bash|sh|shell|console)\s*$")
MARKER = re.compile(r"^<!-- (tested by|run by hand): (.+?) -->$")


def shell_blocks() -> list[tuple[str, int, str, str, list[str]]]:
    """Return (doc, line, marker kind, marker text, commands) for every shell block."""
    blocks = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        index = 0
        while index < len(lines):
            if SHELL_FENCE.match(lines[index]):
                start = index
                index += 1
                body = []
                while not lines[index].startswith("```"):
                    body.append(lines[index])
                    index += 1
                marker = MARKER.match(lines[start - 1]) if start else None
                kind, text = marker.groups() if marker else ("", "")
                blocks.append((doc.name, start + 1, kind, text, commands_of(body)))
            index += 1
    return blocks


def commands_of(body: list[str]) -> list[str]:
    """Join continued lines, drop comments and prompts: the commands a reader types."""
    commands, pending = [], ""
    for raw in body:
        line = raw.removeprefix("$ ").rstrip()
        if pending:
            line = pending + " " + line.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        pending = ""
        line = re.sub(r"\s{2,}#.*$", "", line).strip()
        if line and not line.startswith("#"):
            commands.append(normal(line))
    return commands


def normal(text: str) -> str:
    return " ".join(text.split())


def texts_of(path: Path) -> list[str]:
    """What a command may be found in: a Python file's string constants, or the file's text."""
    if path.suffix != ".py":
        return [normal(path.read_text())]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            values = value if isinstance(value, list | tuple) else [value]
            found += [normal(v) for v in values if isinstance(v, str)]
    return found


BLOCKS = shell_blocks()


def test_the_docs_have_shell_blocks_to_check():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize(
    ("doc", "line", "kind", "marker", "commands"),
    BLOCKS,
    ids=[f"{doc}:{line}" for doc, line, *_ in BLOCKS],
)
def test_each_documented_command_is_run_by_the_test_it_names(doc, line, kind, marker, commands):
    assert kind, f"{doc}:{line}: no <!-- tested by: FILE --> above the block"
    if kind == "run by hand":
        assert len(marker) > 20, f"{doc}:{line}: say why no test runs it"
        return
    files = [ROOT / name for name in marker.split()]
    missing = [str(path.relative_to(ROOT)) for path in files if not path.is_file()]
    assert not missing, f"{doc}:{line}: no such file {missing}"
    texts = [text for path in files for text in texts_of(path)]
    for command in commands:
        assert any(command in text for text in texts), (
            f"{doc}:{line}: {command!r} is in none of {marker}"
        )
