"""An entry's change in words, amounts in dollars (every digit: a trail is read for exact
figures): "budget max: $5.00 → $7.50; rpm limit: none → 60"."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from core.money import format_usd_exact

ARROW = "→"
# A moment as the trail keeps it (audit.services.jsonable): UTC ISO, to the microsecond.
ISO_MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def label(name: str) -> str:
    """A field's name as a person reads it: "budget_max_micro" -> "budget max",
    "input_micro_per_mtok" -> "input per 1M tokens"."""
    text = name.replace("_micro_usd", "").replace("_micro", "")
    text = text.replace("_per_mtok", " per 1M tokens").replace("_per_gb", " per GB")
    return text.replace("_", " ")


def show(name: str, value: Any) -> str:
    """A value as a person reads it: money in dollars, flags on/off, lists joined, a moment
    to the second in UTC (its every digit stays in the entry's before/after)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int) and "micro" in name:
        return format_usd_exact(value)
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if value == "":
        return '""'
    if isinstance(value, str) and ISO_MOMENT.fullmatch(value):
        return f"{datetime.fromisoformat(value).astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    return str(value)


def _flat(values: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings (a profile's models) flattened to "models.gpt-4o.input_micro_per_mtok"."""
    if not isinstance(values, dict):
        return {prefix: values} if prefix else {}
    out: dict[str, Any] = {}
    for name, value in values.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, dict) and value:
            out |= _flat(value, key)
        else:
            out[key] = value
    return out


def _has_under(values: dict[str, Any], key: str) -> bool:
    return any(name.startswith(key + ".") for name in values)


def describe(before: dict, after: dict) -> str:
    """The change between `before` and `after` in one line."""
    old, new = _flat(before or {}), _flat(after or {})
    # A mapping added (or removed) is None on the other side: its fields say it all. A
    # field created (or deleted) empty says nothing either.
    old = {k: v for k, v in old.items() if not (v is None and (_has_under(new, k) or k not in new))}
    new = {k: v for k, v in new.items() if not (v is None and (_has_under(old, k) or k not in old))}
    parts = []
    for key in sorted(set(old) | set(new), key=lambda k: (k.count("."), k)):
        leaf = key.rsplit(".", 1)[-1]
        name = " ".join([*key.split(".")[:-1], label(leaf)])
        if key in old and key in new:
            parts.append(f"{name}: {show(leaf, old[key])} {ARROW} {show(leaf, new[key])}")
        elif key in new:
            parts.append(f"{name}: {show(leaf, new[key])}")
        else:
            parts.append(f"{name} was {show(leaf, old[key])}")
    return "; ".join(parts)


def summary(entry: Any) -> str:
    """An audit entry's change in one line (an entry, or anything with before and after)."""
    return describe(entry.before, entry.after)
