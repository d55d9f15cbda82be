"""The stub's OpenAI moderations: ``POST .../moderations`` (any prefix).

Key ``Authorization: Bearer <key>``; recorded, key-checked and refused like
the other vendor routes (server.py's docstring: a JSON object body with a
non-empty ``model``; OpenAI error shape).  Then, still before faults, a 400
(``param: "input"``) for ``input`` that is not a non-empty string, a
non-empty list of non-empty strings, or a non-empty list of multimodal items
(``{"type": "text", "text": <non-empty string>}`` or ``{"type":
"image_url", "image_url": {"url": <string>}}``, at least one of them text).
Any other field is accepted, ignored and recorded.  Faults: status faults and
``hang`` as usual; the drop kinds close the connection without a response;
``slow`` waits ``delay_ms`` once.

Answer::

    {"id": "modr-stub-<n>",
     "model": <the request's model>,
     "results": [{"flagged": F, "categories": {...}, "category_scores": {...}}, ...],
     "usage": {"prompt_tokens": P, "total_tokens": P}}

``<n>`` is the stub's answer counter (shared with chat's ``chatcmpl-stub-<n>``).
One result per input text in order (a string is one text); a multimodal list
is ONE text, its text items joined with a space (images add nothing).  Each
result names OpenAI's thirteen categories (``CATEGORIES``); every score is
0.0001 and every category false, except, by whole words matched without
regard to case:

* ``violent``: ``violence`` scores 0.91 and is true; flagged;
* ``hateful``: ``hate`` scores 0.85 and is true; flagged;
* ``rude``: ``harassment`` scores 0.3 and stays false; NOT flagged (above a
  0.25 threshold, below the model's own cut: for threshold tests).

``flagged`` is true when any category is.  P is the words of all the texts
(``str.split()``), at least 1.  A real OpenAI answer carries no ``usage``
(its moderation is free); the stub reports one so a priced moderation model
can be tested.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from stubvendor.state import _ids
from stubvendor.vendor import Incoming, _apply_plain_fault, _receive
from stubvendor.wire import _answer, _json, vendor_error

CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
BASE_SCORE = 0.0001
# word -> (the category it scores, its score, whether that category is flagged)
TRIGGERS = {
    "violent": ("violence", 0.91, True),
    "hateful": ("hate", 0.85, True),
    "rude": ("harassment", 0.3, False),
}
_WORDS = {word: re.compile(rf"\b{word}\b", re.IGNORECASE) for word in TRIGGERS}


def moderation_result(text: str) -> dict[str, Any]:
    """Return the stub's verdict on one text (the rule is in the module docstring)."""
    categories = dict.fromkeys(CATEGORIES, False)
    scores = dict.fromkeys(CATEGORIES, BASE_SCORE)
    for word, (category, score, flagged) in TRIGGERS.items():
        if _WORDS[word].search(text):
            scores[category] = score
            categories[category] = flagged
    return {
        "flagged": any(categories.values()),
        "categories": categories,
        "category_scores": scores,
    }


def _item_text(item: Any) -> str | None:
    """Return a multimodal item's text ("" for an image), or None when malformed."""
    if not isinstance(item, dict):
        return None
    if item.get("type") == "text":
        text = item.get("text")
        return text if isinstance(text, str) and text else None
    image = item.get("image_url")
    if item.get("type") == "image_url" and isinstance(image, dict):
        return "" if isinstance(image.get("url"), str) else None
    return None


def moderation_texts(raw: Any) -> list[str] | None:
    """Return the texts an input is judged as, or None when it is not an accepted form."""
    if isinstance(raw, str):
        return [raw] if raw else None
    if not isinstance(raw, list) or not raw:
        return None
    if all(isinstance(item, str) and item for item in raw):
        return raw
    parts = [_item_text(item) for item in raw]
    texts = [part for part in parts if part]
    if None in parts or not texts:
        return None
    return [" ".join(texts)]


def moderations_body(model: str, texts: list[str], seq: int) -> dict[str, Any]:
    """Build the answer of a moderations call."""
    tokens = max(sum(len(text.split()) for text in texts), 1)
    return {
        "id": f"modr-stub-{seq}",
        "model": model,
        "results": [moderation_result(text) for text in texts],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def create_moderation(request: web.Request, shape: str) -> web.StreamResponse:
    """Answer ``POST .../moderations``."""
    incoming = await _receive(request, shape)
    if not isinstance(incoming, Incoming):
        return incoming
    call = incoming.call
    texts = moderation_texts(incoming.body.get("input"))
    if texts is None:
        message = (
            "input: a non-empty string, a list of non-empty strings or a list of "
            "text and image_url items is required."
        )
        return _answer(call, vendor_error(shape, 400, message, param="input"))
    resp = await _apply_plain_fault(
        request, call, shape, incoming.key, incoming.raw_key, incoming.model
    )
    if resp is not None:
        return resp
    return _answer(call, _json(200, moderations_body(incoming.model, texts, next(_ids))))
