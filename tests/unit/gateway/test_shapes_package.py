"""The shapes package as a whole: pure translation behind named interfaces. Each shape's
object offers what its protocols name, with the same parameters, and the package loads
without Django."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.shapes.anthropic import ANTHROPIC_SHAPE
from gateway.shapes.embeddings import EMBEDDINGS_SHAPE
from gateway.shapes.internal import INTERNAL_SHAPE
from gateway.shapes.moderations import MODERATIONS_SHAPE
from gateway.shapes.openai import OPENAI_SHAPE
from gateway.shapes.protocols import ClientShape, VendorShape
from gateway.shapes.responses import RESPONSES_SHAPE

SHAPES_DIR = Path(__file__).resolve().parents[3] / "gateway" / "shapes"
VENDOR_SHAPES = [
    OPENAI_SHAPE,
    ANTHROPIC_SHAPE,
    RESPONSES_SHAPE,
    EMBEDDINGS_SHAPE,
    MODERATIONS_SHAPE,
]
CLIENT_SHAPES = [*VENDOR_SHAPES, INTERNAL_SHAPE]


def protocol_methods(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_")]


def keyword_parameters(function) -> dict[str, object]:
    """Return a callable's keyword-only parameters and their defaults (`self` left out)."""
    return {
        name: parameter.default
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }


@pytest.mark.parametrize(
    ("shape", "protocol"),
    [(shape, ClientShape) for shape in CLIENT_SHAPES]
    + [(shape, VendorShape) for shape in VENDOR_SHAPES],
    ids=lambda value: type(value).__name__,
)
def test_each_shape_object_takes_what_its_protocol_names(shape, protocol):
    assert isinstance(shape, protocol)
    for name in protocol_methods(protocol):
        wanted = keyword_parameters(getattr(protocol, name))
        offered = keyword_parameters(getattr(shape, name))
        # A shape may take more (the internal routes' `stream`), never less nor otherwise.
        assert {key: offered.get(key) for key in wanted} == wanted, name


def test_the_shapes_load_without_django():
    modules = sorted(path.stem for path in SHAPES_DIR.glob("*.py") if path.stem != "__init__")
    program = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('gateway.shapes.' + name)\n"
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=SHAPES_DIR.parents[1],
        env={"PATH": "/usr/bin:/bin"},  # no DJANGO_SETTINGS_MODULE
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
