"""Validation helpers both client shapes share."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from core.errors import InvalidRequest

TEXT_PART_FIELDS = frozenset({"type", "text"})


def text_of(content: Any, *, where: str) -> str:
    """Return the text of a message content (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InvalidRequest(f"{where}: content part type {kind!r} is not supported.")
            refuse_unknown(part, TEXT_PART_FIELDS, where=f"{where}: ")
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest(f"{where}: a text part needs a string 'text'.")
            texts.append(text)
        return "".join(texts)
    raise InvalidRequest(f"{where}: content must be a string or a list of text parts.")


def optional_number(body: dict, name: str, *, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be a number from {low} to {high}.")
    return float(value)


def optional_max_tokens(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(f"'{name}' must be a positive integer.")
    return value


def refuse_unknown(body: dict, allowed: frozenset[str], *, where: str = "") -> None:
    """Refuse fields we cannot honour on every vendor: never drop one silently."""
    for name, value in body.items():
        if name not in allowed and value not in (None, [], {}):
            raise InvalidRequest(f"{where}'{name}' is not supported by Tollgate.")


def model_chain(model: Any, fallback: Any) -> tuple[str, ...]:
    """Return the client's chain: `"a,b"` in order, then the fallback model(s).

    The whole chain holds at most TOLLGATE_MAX_ROUTE distinct models: each link may cost
    two vendor calls and its own hold, so a long list is refused before any vendor sees it.
    """
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest("'model' is required.")
    chain = [name.strip() for name in model.split(",") if name.strip()]
    if fallback:
        if not isinstance(fallback, str):
            raise InvalidRequest("The fallback model must be a string.")
        chain.extend(name.strip() for name in fallback.split(",") if name.strip())
    if not chain:
        raise InvalidRequest("'model' is required.")
    models = tuple(dict.fromkeys(chain))
    limit = settings.TOLLGATE["MAX_ROUTE"]
    if len(models) > limit:
        raise InvalidRequest(
            f"The route list names {len(models)} models; at most {limit} are allowed "
            "(the model and its fallbacks together)."
        )
    return models
