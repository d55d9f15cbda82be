"""The stub's OpenAI embeddings: ``POST .../embeddings`` (any prefix).

Key ``Authorization: Bearer <key>``; recorded, key-checked and refused like
the other vendor routes (server.py's docstring: a JSON object body with a
non-empty ``model``; OpenAI error shape).  Then, still before faults, a 400
(``param`` naming the field) for:

* ``input`` that is not a non-empty string, a non-empty list of non-empty
  strings, a non-empty list of integers (one token array) or a non-empty list
  of non-empty integer lists (token arrays);
* ``dimensions`` present and not null but not an int in 1..65536;
* ``encoding_format`` present and not null but neither ``"float"`` nor
  ``"base64"``.

``user`` and any other field are accepted, ignored and recorded.  Faults:
status faults and ``hang`` as usual; the drop kinds close the connection
without a response; ``slow`` waits ``delay_ms`` once.

Answer::

    {"object": "list",
     "data": [{"object": "embedding", "index": i, "embedding": V_i}, ...],
     "model": <the request's model>,
     "usage": {"prompt_tokens": P, "total_tokens": P}}

one entry per input item in order (a string or a single token array is one
item).  ``V_i`` is ``embedding_vector(model, item_i, dimensions)`` as a list
of floats, or with ``encoding_format: "base64"`` the base64 of those values
packed as little-endian float32 (what the openai SDK asks for when the
caller names no format, and decodes itself).

The vector rule (so other tests can recompute one): ``dimensions`` defaults
to 8.  Take the SHAKE-256 digest of the compact JSON of ``[model, item]``
(``orjson.dumps``: UTF-8, no spaces; e.g. ``["m1","hello world"]`` or
``["m1",[1,2,3]]``), ``2 * dimensions`` bytes long; read it as big-endian
unsigned 16-bit integers u_0, u_1, ...; component j is ``(u_j - 32768) /
32768``.  Every value is a multiple of 2**-15 in [-1, 1), hence exact in
float32 (the float list and the decoded base64 are equal to the last bit);
a smaller ``dimensions`` gives a prefix of the same vector.  Vectors are not
normalised.

Tokens: a string counts its words (``str.split()``), at least 1; a token
array counts its length.  P is the sum over the items.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from stubvendor.vendor import Incoming, _apply_plain_fault, _receive
from stubvendor.wire import _answer, _is_int, _json, vendor_error

DEFAULT_DIMENSIONS = 8
MAX_DIMENSIONS = 65536  # a guard: a mistaken huge value must not exhaust the stub
_HALF_RANGE = 32768  # 2**15: uint16 -> [-1, 1)

Item = str | list[int]


def embedding_vector(model: str, item: Item, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """Return the stub's embedding of one input item (the rule is in the module docstring)."""
    digest = hashlib.shake_256(orjson.dumps([model, item])).digest(2 * dimensions)
    return [(u - _HALF_RANGE) / _HALF_RANGE for u in struct.unpack(f">{dimensions}H", digest)]


def embedding_tokens(item: Item) -> int:
    """Count an item's tokens: a string's words (at least 1), a token array's length."""
    return max(len(item.split()), 1) if isinstance(item, str) else len(item)


def _encode_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _token_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_int(t) for t in value)


def _items(raw: Any) -> list[Item] | None:
    """Return the input's items, or None when ``input`` is not an accepted form."""
    if isinstance(raw, str):
        return [raw] if raw else None
    if _token_array(raw):
        return [raw]
    if not isinstance(raw, list) or not raw:
        return None
    if all(isinstance(item, str) and item for item in raw) or all(map(_token_array, raw)):
        return raw
    return None


@dataclass(frozen=True)
class EmbeddingsRequest:
    items: list[Item]
    dimensions: int
    base64: bool


def _parse(body: dict[str, Any], shape: str) -> EmbeddingsRequest | web.Response:
    """Read the body's fields, or the 400 OpenAI answers for a bad one."""
    items = _items(body.get("input"))
    if items is None:
        message = (
            "input: a non-empty string, a list of non-empty strings, a token array "
            "or a list of token arrays is required."
        )
        return vendor_error(shape, 400, message, param="input")
    dimensions = body.get("dimensions")
    if dimensions is None:
        dimensions = DEFAULT_DIMENSIONS
    elif not (_is_int(dimensions) and 1 <= dimensions <= MAX_DIMENSIONS):
        message = f"dimensions: an integer from 1 to {MAX_DIMENSIONS} is required."
        return vendor_error(shape, 400, message, param="dimensions")
    encoding = body.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        message = "encoding_format: 'float' or 'base64' is required."
        return vendor_error(shape, 400, message, param="encoding_format")
    return EmbeddingsRequest(items, dimensions, encoding == "base64")


def embeddings_body(model: str, request: EmbeddingsRequest) -> dict[str, Any]:
    """Build the ``list`` answer of an embeddings call."""
    data = []
    for index, item in enumerate(request.items):
        vector = embedding_vector(model, item, request.dimensions)
        embedding = _encode_base64(vector) if request.base64 else vector
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(embedding_tokens(item) for item in request.items)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def create_embeddings(request: web.Request, shape: str) -> web.StreamResponse:
    """Answer ``POST .../embeddings``."""
    incoming = await _receive(request, shape)
    if not isinstance(incoming, Incoming):
        return incoming
    call = incoming.call
    parsed = _parse(incoming.body, shape)
    if isinstance(parsed, web.Response):
        return _answer(call, parsed)
    resp = await _apply_plain_fault(
        request, call, shape, incoming.key, incoming.raw_key, incoming.model
    )
    if resp is not None:
        return resp
    return _answer(call, _json(200, embeddings_body(incoming.model, parsed)))
