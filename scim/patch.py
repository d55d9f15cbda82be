"""Apply a SCIM PATCH (RFC 7644 §3.5.2) to a resource's writable attributes, as a dict.

The caller gives the resource's writable attributes as a read shows them, applies the
operations here, then stores the result through the same code as a PUT: one set of rules
for both. Accepts the forms Okta and Microsoft Entra ID send:

- `op` in any case ("replace", "Replace");
- a path naming an attribute, a sub-attribute (`name.givenName`), a filtered multi-valued
  attribute (`members[value eq "42"]`, `emails[type eq "work"].value`), with or without the
  schema's URN before it;
- no path, the value an object of attributes (Okta's `{"active": false}`), whose keys may be
  paths themselves (Entra's `{"name.givenName": "Ada"}`);
- `remove` of `members` with a value listing the members to remove (Entra);
- booleans sent as strings ("False"), as Entra sends `active`.
"""

from __future__ import annotations

import re
from typing import Any

from scim.errors import ScimError, invalid_value

PATH = re.compile(
    r"^(?P<attr>[A-Za-z$][\w$-]*)(?:\[(?P<filter>[^\]]+)\])?(?:\.(?P<sub>[A-Za-z$][\w$-]*))?$"
)
VALUE_FILTER = re.compile(
    r'^\s*(?P<attr>[A-Za-z$][\w$.-]*)\s+eq\s+(?P<value>"(?:[^"\\]|\\.)*"|true|false|null|-?\d+)\s*$',
    re.IGNORECASE,
)


def no_target(detail: str) -> ScimError:
    return ScimError(400, detail, "noTarget")


def invalid_path(detail: str) -> ScimError:
    return ScimError(400, detail, "invalidPath")


def literal(raw: str) -> Any:
    """A filter's comparison value: a JSON string, true, false, null or an integer."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    if raw.startswith('"'):
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return int(raw)


def parse_eq(text: str) -> tuple[str, Any]:
    """Parse `attr eq value` (the one comparison supported); raise invalidFilter else."""
    match = VALUE_FILTER.match(text)
    if match is None:
        raise ScimError(
            400, f"Only 'attribute eq value' filters are supported: {text!r}.", "invalidFilter"
        )
    return match["attr"], literal(match["value"])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


def _matches(item: Any, where: tuple[str, Any] | None) -> bool:
    if where is None:
        return True
    name, value = where
    return isinstance(item, dict) and _same(_lookup(item, name), value)


def _lookup(item: dict, name: str) -> Any:
    for key, value in item.items():
        if key.lower() == name.lower():
            return value
    return None


# Attributes a read answers that no write may set (RFC 7643 §3.1, §4.1.2).
READ_ONLY = {"id", "meta", "schemas", "groups"}


def _key(name: str, known: dict[str, str]) -> str | None:
    """The attribute's spelling (names compare without case, RFC 7643 §2.1); None for one
    our schema does not list: accepted and not kept, so a directory's default mappings
    (title, phoneNumbers, the enterprise extension) work unchanged."""
    if name.lower() in READ_ONLY:
        raise ScimError(400, f"{name} is read-only.", "mutability")
    return known.get(name.lower())


def strip_urn(path: str, urns: tuple[str, ...]) -> str:
    for urn in urns:
        if path.lower().startswith(urn.lower() + ":"):
            return path[len(urn) + 1 :]
    return path


def as_bool(value: Any) -> Any:
    """Entra sends booleans as "True"/"False": read those as booleans, leave others."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def apply(
    resource: dict,
    operations: Any,
    *,
    known: dict[str, str],
    multi: set[str],
    urns: tuple[str, ...],
    key_of: dict[str, str] | None = None,
) -> dict:
    """Return `resource` with `operations` applied. `known` maps each writable attribute's
    lower-cased name to its spelling; `multi` names the multi-valued ones; `key_of` names the
    sub-attribute that identifies an item of a multi-valued attribute (members: value)."""
    if not isinstance(operations, list) or not operations:
        raise invalid_value("A PatchOp has a non-empty list of Operations.")
    for operation in operations:
        if not isinstance(operation, dict):
            raise invalid_value("Each operation is an object.")
        op = str(_lookup(operation, "op") or "").lower()
        if op not in ("add", "replace", "remove"):
            raise invalid_value(f"op is add, replace or remove, not {op!r}.")
        path = _lookup(operation, "path")
        value = _lookup(operation, "value")
        if path in (None, ""):
            if op == "remove":
                raise no_target("A remove names its target in path.")
            if not isinstance(value, dict):
                raise invalid_value("Without a path, the value is an object of attributes.")
            _apply_object(resource, op, value, known, multi, urns, key_of or {})
        else:
            if not isinstance(path, str):
                raise invalid_path("path is a string.")
            name = strip_urn(path, urns)
            if name.lower().startswith("urn:"):
                continue  # an attribute of a schema extension: none is kept
            _apply_path(resource, op, name, value, known, multi, key_of or {})
    return resource


def _apply_object(resource, op, value: dict, known, multi, urns, key_of) -> None:
    """A pathless add or replace: each key is a path, or a schema's URN holding attributes."""
    for name, each in value.items():
        if name.lower() in urns_lower(urns) and isinstance(each, dict):
            _apply_object(resource, op, each, known, multi, urns, key_of)
            continue
        name = strip_urn(name, urns)
        if name.lower().startswith("urn:"):
            continue  # a schema extension's object or attribute: none is kept
        _apply_path(resource, op, name, each, known, multi, key_of)


def urns_lower(urns: tuple[str, ...]) -> set[str]:
    return {urn.lower() for urn in urns}


def _apply_path(
    resource: dict,
    op: str,
    path: str,
    value: Any,
    known: dict[str, str],
    multi: set[str],
    key_of: dict[str, str],
) -> None:
    match = PATH.match(path.strip())
    if match is None:
        raise invalid_path(f"Cannot read the path {path!r}.")
    attr = _key(match["attr"], known)
    if attr is None:
        return
    where = parse_eq(match["filter"]) if match["filter"] else None
    sub = match["sub"]
    if attr == "active":
        value = as_bool(value)
    if attr in multi:
        _apply_multi(resource, op, attr, where, sub, value, key_of.get(attr))
        return
    if where is not None:
        raise invalid_path(f"{attr} is single-valued: it takes no filter.")
    if sub is not None:
        current = resource.get(attr) or {}
        if not isinstance(current, dict):
            raise invalid_path(f"{attr} has no sub-attributes.")
        if op == "remove":
            current.pop(sub, None)
        else:
            current[sub] = value
        resource[attr] = current or None
        return
    if op == "remove":
        resource[attr] = None
    elif isinstance(value, dict) and isinstance(resource.get(attr), dict):
        resource[attr] = {**resource[attr], **value}  # a complex value's other sub-attributes stay
    else:
        resource[attr] = value


def _apply_multi(
    resource: dict,
    op: str,
    attr: str,
    where: tuple[str, Any] | None,
    sub: str | None,
    value: Any,
    item_key: str | None,
) -> None:
    items = list(resource.get(attr) or [])
    if op == "remove":
        if where is None and sub is None and value is not None and item_key:
            # Entra: remove these members, named in value.
            drop = {_lookup(v, item_key) for v in (value if isinstance(value, list) else [value])}
            items = [i for i in items if _lookup(i, item_key) not in drop]
        elif where is None and sub is None:
            items = []
        elif sub is None:
            items = [i for i in items if not _matches(i, where)]
        else:
            for item in items:
                if _matches(item, where) and isinstance(item, dict):
                    item.pop(sub, None)
        resource[attr] = items or None
        return
    if where is None and sub is None:
        new = value if isinstance(value, list) else [value]
        if op == "replace":
            items = list(new)
        else:
            for each in new:
                if item_key and any(
                    _same(_lookup(i, item_key), _lookup(each, item_key)) for i in items
                ):
                    continue
                items.append(each)
        resource[attr] = items
        return
    targets = [i for i in items if _matches(i, where)]
    if not targets:
        if op == "replace" and where is not None:
            raise no_target(f"No {attr} value matches the filter.")
        created = {where[0]: where[1]} if where is not None else {}
        items.append(created)
        targets = [created]
    for item in targets:
        if sub is not None:
            item[sub] = value
        elif isinstance(value, dict):
            item.update(value)
        else:
            raise invalid_value(f"A filtered {attr} takes an object value.")
    resource[attr] = items
