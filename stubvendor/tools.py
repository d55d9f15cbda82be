"""Which tools an answer calls, and their arguments, built from each tool's JSON schema.

The rules are the Answer section of stubvendor/answers.py's docstring ("Tool calls",
"Arguments / input").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stubvendor.wire import _as_list

_SCHEMA_MAX_DEPTH = 32


def _resolve_ref(root: Any, ref: str) -> Any:
    """Resolve a local JSON pointer (``#/$defs/Name``) against the root schema."""
    if not ref.startswith("#"):
        return None
    node = root
    for raw in ref[1:].split("/")[1:]:
        name = raw.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
    return node


def _object_example(schema: dict[str, Any], root: Any, depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    return {
        name: example_from_schema(properties.get(name), root, depth + 1)
        for name in _as_list(schema.get("required"))
        if isinstance(name, str)
    }


_EXAMPLES: dict[str, Callable[[dict[str, Any], Any, int], Any]] = {
    "string": lambda s, r, d: "stub",
    "integer": lambda s, r, d: 1,
    "number": lambda s, r, d: 1.5,
    "boolean": lambda s, r, d: True,
    "array": lambda s, r, d: [],
    "object": _object_example,
}


def _schema_type(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and ("properties" in schema or "required" in schema):
        kind = "object"
    return kind


def example_from_schema(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """Build the deterministic value a JSON schema asks for (stubvendor/answers.py's docstring)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > _SCHEMA_MAX_DEPTH:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return example_from_schema(_resolve_ref(root, ref), root, depth + 1)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "const" in schema:
        return schema["const"]
    build = _EXAMPLES.get(_schema_type(schema))
    return build(schema, root, depth) if build is not None else None


def tool_arguments(schema: Any) -> dict[str, Any]:
    """Arguments for a tool call (or a json_schema answer): an object, ``{}`` at least."""
    value = example_from_schema(schema)
    return value if isinstance(value, dict) else {}


def _tool_specs(body: dict[str, Any], shape: str) -> list[tuple[str, Any]]:
    """(name, parameter schema) of every callable tool, in request order."""
    specs = []
    for tool in _as_list(body.get("tools")):
        if not isinstance(tool, dict):
            continue
        if shape == "anthropic":
            if isinstance(tool.get("name"), str):
                specs.append((tool["name"], tool.get("input_schema")))
            continue
        function = tool.get("function")
        if (
            tool.get("type", "function") == "function"
            and isinstance(function, dict)
            and isinstance(function.get("name"), str)
        ):
            specs.append((function["name"], function.get("parameters")))
    return specs


def _tool_choice(body: dict[str, Any], shape: str) -> tuple[bool, str | None, bool]:
    """Return (tools may be called, forced tool name or None, parallel calls allowed)."""
    choice = body.get("tool_choice")
    if shape == "openai":
        forced = None
        if isinstance(choice, dict) and choice.get("type") == "function":
            function = choice.get("function")
            forced = function.get("name") if isinstance(function, dict) else None
        parallel = body.get("parallel_tool_calls") is not False
        return choice != "none", forced if isinstance(forced, str) else None, parallel
    choice = choice if isinstance(choice, dict) else {}
    kind = choice.get("type")
    forced = choice.get("name") if kind == "tool" else None
    parallel = choice.get("disable_parallel_tool_use") is not True
    return kind != "none", forced if isinstance(forced, str) else None, parallel


def _last_is_tool_result(body: dict[str, Any], shape: str) -> bool:
    messages = _as_list(body.get("messages"))
    last = messages[-1] if messages else None
    if not isinstance(last, dict):
        return False
    if shape == "openai":
        return last.get("role") == "tool"
    return last.get("role") == "user" and any(
        isinstance(block, dict) and block.get("type") == "tool_result"
        for block in _as_list(last.get("content"))
    )


def pick_tools(
    specs: list[tuple[str, Any]],
    *,
    allowed: bool,
    forced: str | None,
    parallel: bool,
    after_tool_result: bool,
) -> list[tuple[str, Any]] | str:
    """Choose the tools the answer calls ([] = answer text), or say why tool_choice is bad."""
    if not specs or not allowed:
        return []
    if forced is not None:
        chosen = [spec for spec in specs if spec[0] == forced][:1]
        if not chosen:
            return f"tool_choice names a tool that is not in tools: {forced!r}."
    elif parallel and len(specs) >= 2:
        chosen = specs[:2]
    else:
        chosen = specs[:1]
    return [] if after_tool_result else chosen


def choose_tools(body: dict[str, Any], shape: str) -> list[tuple[str, Any]] | str:
    """Choose the tools of a chat / messages answer (see ``pick_tools``)."""
    allowed, forced, parallel = _tool_choice(body, shape)
    return pick_tools(
        _tool_specs(body, shape),
        allowed=allowed,
        forced=forced,
        parallel=parallel,
        after_tool_result=_last_is_tool_result(body, shape),
    )
