"""OpenAI's embeddings shape: `POST /v1/embeddings`, one answer, never streamed.

Served by OpenAI-shaped vendors only, on models a profile marks `"kind": "embedding"`. The
body goes as it came but for what Tollgate owns (the model mapped, the end user replaced by
the caller label); the answer comes back with only the model name mapped. Priced per input
token; there are no output tokens, so the hold is the prompt's bound alone.
"""

from __future__ import annotations

from typing import Any, NoReturn

import orjson

from core.errors import InvalidRequest
from gateway.shapes.common import checked_string, model_chain, split_tags, unknown_fields
from gateway.types import EMBEDDINGS, Completion, ModelRequest, Usage

OWNED = frozenset({"model", "user", "fallback_model"})
KNOWN = OWNED | frozenset({"input", "dimensions", "encoding_format"})
ENCODINGS = frozenset({"float", "base64"})
MAX_INPUTS = 2048  # OpenAI's own limit on the inputs of one request


def parse_request(body: dict, *, fallback_header: str | None = None) -> ModelRequest:
    """Check an embeddings body and keep it whole; measure its input for the hold."""
    body, tags = split_tags(body)
    inputs = _inputs(body.get("input"))
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise InvalidRequest("'dimensions' must be a positive integer.")
    if body.get("encoding_format") not in (None, *ENCODINGS):
        raise InvalidRequest("'encoding_format' must be 'float' or 'base64'.")
    chain = model_chain(body.get("model"), body.get("fallback_model") or fallback_header)
    return ModelRequest(
        model=chain[0],
        shape=EMBEDDINGS,
        body=body,
        tags=tags,
        chain=chain,
        caller_id=checked_string(body.get("user"), "user"),
        prompt_bytes=sum(_bound(item) for item in inputs),
        prompt_parts=len(inputs),
        unknown=unknown_fields(body, KNOWN),
    )


def _inputs(raw: Any) -> list[str | list[int]]:
    """Return the inputs as a list: strings, or token arrays (lists of token ids)."""
    if isinstance(raw, str) or _is_tokens(raw):
        inputs = [raw]
    elif isinstance(raw, list) and raw:
        inputs = raw
    else:
        raise InvalidRequest(
            "'input' must be a string, a list of strings, a token array or a list of them."
        )
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest(f"'input' holds {len(inputs)} items; at most {MAX_INPUTS}.")
    for index, item in enumerate(inputs):
        if not (isinstance(item, str) and item) and not _is_tokens(item):
            raise InvalidRequest(
                f"input[{index}] must be a non-empty string or a non-empty token array."
            )
    return inputs


def _is_tokens(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


def _bound(item: str | list[int]) -> int:
    # A text's tokens are at most its bytes; a token array is exactly its length.
    return len(item.encode()) if isinstance(item, str) else len(item)


# ---- vendor side ----


def vendor_body(
    payload: dict,
    *,
    upstream_model: str,
    caller_label: str | None,
    max_tokens: int,
    stream: bool,
) -> bytes:
    """Build the vendor's body: the payload as it is, the model mapped, the caller label as
    its end user (or none). There is no output cap and no stream."""
    body = {name: value for name, value in payload.items() if name not in OWNED}
    body["model"] = upstream_model
    if caller_label:
        body["user"] = caller_label
    return orjson.dumps(body)


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    usage = data.get("usage") or {}
    return Completion(
        shape=EMBEDDINGS,
        data=data,
        text="",
        finish_reason="stop",
        usage=Usage(input_tokens=int(usage.get("prompt_tokens") or 0)),
        model=model,
    )


# ---- client side ----


def render_completion(c: Completion, *, request_id: str, req: ModelRequest) -> bytes:
    return orjson.dumps({**c.data, "model": c.model})


def stream_renderer(req: ModelRequest, *, request_id: str, model: str) -> NoReturn:
    """Refuse: an embeddings answer is never streamed (parse_request never asks for one)."""
    raise ValueError("An embeddings answer is never streamed.")


class EmbeddingsShape:
    """The embeddings shape, as the pipeline (ClientShape) and the adapters (VendorShape) use
    it."""

    parse_request = staticmethod(parse_request)
    render_completion = staticmethod(render_completion)
    stream_renderer = staticmethod(stream_renderer)
    vendor_body = staticmethod(vendor_body)
    completion_from_vendor = staticmethod(completion_from_vendor)


EMBEDDINGS_SHAPE = EmbeddingsShape()
