"""The field toolkit beneath every translation between shapes (requests_to_anthropic,
requests_to_openai, responses_requests, and the answers and streams coming back).

A client speaks one shape and a vendor another; the translators turn the client's request
body into the vendor's, and the vendor's answer (whole, or streamed event by event) back into
the client's. They are pure functions that know nothing of models, keys or limits, and they
share these rules, which the helpers below carry out:

- Nothing is silently dropped. A field, value or content part with no faithful counterpart
  raises `InvalidRequest("'<path>' [<kind>] cannot be translated for <vendor_kind> vendors.")`
  (`untranslatable`): <path> as the client wrote it (`messages[2].content[0].type`), <kind>
  the offending value where it is a type or an enumerated value (`input_audio`, `high`) or a
  short reason (`above 1`). A neutral value (None, False, an empty list or dict, a field's own
  default such as `n: 1` or `service_tier: "auto"`) asks for nothing and is omitted
  (`refuse_rest`).
- Owned fields (model, output cap, streaming switches, end-user id, fallback model) are
  dropped from the request and never translated: the adapter sets them afterwards. The raw
  end-user id never reaches a translated body.
- A response comes from a vendor asked with a translated request, so what cannot arrive
  raises ValueError (`cannot_arrive`): the vendor broke the contract, not the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from core.errors import InvalidRequest

TEXT_PART = frozenset({"type", "text"})  # a text part or block: the same in both chat shapes
PDF = "application/pdf"
# OpenAI's prompt-cache defaults, in chat and Responses bodies alike: sent explicitly they ask
# for nothing another vendor lacks.
PROMPT_CACHE_DEFAULTS: tuple[Any, ...] = (
    {"mode": "implicit"},
    {"ttl": "30m"},
    {"mode": "implicit", "ttl": "30m"},
)


# ---------------------------------------------------------------- refusals and neutral values


def untranslatable(
    path: str, vendor_kind: str, kind: str | None = None, *, why: str | None = None
) -> InvalidRequest:
    """Build the refusal of the client's field at `path`, optionally naming its value's kind
    and saying why."""
    shown = f"'{path}' {kind}" if kind else f"'{path}'"
    reason = f": {why}." if why else "."
    return InvalidRequest(f"{shown} cannot be translated for {vendor_kind} vendors{reason}")


def malformed(path: str, expected: str) -> InvalidRequest:
    return InvalidRequest(f"'{path}' must be {expected}.")


def is_neutral(value: Any) -> bool:
    """Tell whether a value asks for nothing: None, False, an empty list, an all-neutral dict."""
    if value is None or value is False:
        return True
    if isinstance(value, list):
        return not value
    if isinstance(value, dict):
        return all(is_neutral(item) for item in value.values())
    return False


def is_default(value: Any, defaults: tuple[Any, ...]) -> bool:
    # Compared with the type too: `True == 1` and `0 == False` must not pass for each other.
    return any(type(value) is type(default) and value == default for default in defaults)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _refusal_of(path: str, value: Any, vendor: str) -> InvalidRequest:
    # A typed object is named by its type: `'thinking.type' enabled`.
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return untranslatable(f"{path}.type", vendor, value["type"])
    return untranslatable(path, vendor)


def refuse_rest(
    obj: Mapping[str, Any],
    *,
    handled: frozenset[str],
    path: str,
    vendor: str,
    defaults: Mapping[str, tuple[Any, ...]] | None = None,
) -> None:
    """Refuse every field of `obj` the translation does not handle, unless it is neutral."""
    defaults = defaults or {}
    for key, value in obj.items():
        if key in handled or is_neutral(value) or is_default(value, defaults.get(key, ())):
            continue
        raise _refusal_of(_child(path, key), value, vendor)


def as_dict(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise malformed(path, "an object")
    return value


def as_list(value: Any, path: str) -> list:
    if not isinstance(value, list):
        raise malformed(path, "a list")
    return value


def as_text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise malformed(path, "a string")
    return value


def split_data_url(url: str) -> tuple[str, str] | None:
    """Split `data:<media>[;...];base64,<data>` into (media, data); None for anything else."""
    if not url.startswith("data:"):
        return None
    header, comma, data = url[len("data:") :].partition(",")
    params = header.split(";")
    if not comma or params[-1] != "base64":
        return None
    return params[0], data


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


FieldTranslator = Callable[[Any, str], dict]


def renamed(name: str) -> FieldTranslator:
    """Translate a field whose value both shapes share, under `name`."""
    return lambda value, _vendor: {name: value}


def text_content(
    content: Any, path: str, vendor: str, *, handled: frozenset[str] = TEXT_PART
) -> str | list[dict]:
    """Translate a content that may only hold text: a string stays one; parts or blocks stay
    text parts / blocks (the two shapes write them alike), so no separator is invented."""
    if isinstance(content, str):
        return content
    return [
        text_block(part, f"{path}[{index}]", vendor, handled=handled)
        for index, part in enumerate(as_list(content, path))
    ]


def text_block(part: Any, path: str, vendor: str, *, handled: frozenset[str] = TEXT_PART) -> dict:
    part = as_dict(part, path)
    if part.get("type") != "text":
        raise untranslatable(f"{path}.type", vendor, str(part.get("type")))
    refuse_rest(part, handled=handled, path=path, vendor=vendor)
    return {"type": "text", "text": as_text(part.get("text"), f"{path}.text")}


def cannot_arrive(what: str) -> ValueError:
    return ValueError(f"{what} cannot arrive: the translated request does not ask for it.")
