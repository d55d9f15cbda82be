"""OpenAI's moderations shape: `POST /v1/moderations`, one answer, never streamed.

Served by OpenAI-shaped vendors only (providers.models.MODERATION_KINDS), on models a
profile marks `"kind": "moderation"`. The body goes as it came but for what Tollgate owns
(the model mapped, a `user` field kept back); the answer comes back with only the model
name mapped. Priced per input token when the vendor reports usage; OpenAI's own moderation
is free and reports none, so it costs nothing. There are no output tokens: the hold is the
prompt's bound alone.

`input` is a string, a list of strings, or OpenAI's multimodal list of items: text items
(`{"type": "text", "text": ...}`) are taken; image items are refused (LM-2001), as the
prompt bound has no measure for them here.
"""

from __future__ import annotations

from typing import Any, NoReturn

import orjson

from core.errors import InvalidRequest
from gateway.shapes.common import checked_string, model_chain, split_tags, unknown_fields
from gateway.types import MODERATIONS, Completion, ModelRequest, Usage

# OpenAI's moderations API has no end-user field: a client's `user` names its caller (the
# label's source, as on the other routes) and is never sent on, raw or labelled.
OWNED = frozenset({"model", "user", "fallback_model"})
KNOWN = OWNED | frozenset({"input"})
MAX_INPUTS = 2048  # a guard like embeddings': one request's texts are bounded
INPUT_FORMS = "'input' must be a string, a list of strings or a list of text items."


def parse_request(body: dict, *, fallback_header: str | None = None) -> ModelRequest:
    """Check a moderations body and keep it whole; measure its texts for the hold."""
    body, tags = split_tags(body)
    texts = input_texts(body.get("input"))
    chain = model_chain(body.get("model"), body.get("fallback_model") or fallback_header)
    return ModelRequest(
        model=chain[0],
        shape=MODERATIONS,
        body=body,
        tags=tags,
        chain=chain,
        caller_id=checked_string(body.get("user"), "user"),
        # A text's tokens are at most its bytes.
        prompt_bytes=sum(len(text.encode()) for text in texts),
        prompt_parts=len(texts),
        unknown=unknown_fields(body, KNOWN),
    )


def input_texts(raw: Any) -> list[str]:
    """Return the texts of a moderations `input` (LM-2001 for any other form)."""
    if isinstance(raw, str):
        inputs: list[Any] = [raw]
    elif isinstance(raw, list) and raw:
        inputs = raw
    else:
        raise InvalidRequest(INPUT_FORMS)
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest(f"'input' holds {len(inputs)} items; at most {MAX_INPUTS}.")
    if all(isinstance(item, str) for item in inputs):
        for index, text in enumerate(inputs):
            if not text:
                raise InvalidRequest(f"input[{index}] must be a non-empty string.")
        return inputs
    return [_item_text(item, index) for index, item in enumerate(inputs)]


def _item_text(item: Any, index: int) -> str:
    if not isinstance(item, dict):
        raise InvalidRequest(INPUT_FORMS)
    if item.get("type") == "image_url":
        raise InvalidRequest(
            f"input[{index}] is an image: Tollgate's moderations take text items only."
        )
    text = item.get("text")
    if item.get("type") != "text" or not isinstance(text, str) or not text:
        raise InvalidRequest(f"input[{index}] must be a text item with a non-empty 'text'.")
    return text


# ---- vendor side ----


def vendor_body(
    payload: dict,
    *,
    upstream_model: str,
    caller_label: str | None,
    max_tokens: int,
    stream: bool,
) -> bytes:
    """Build the vendor's body: the payload as it is, the model mapped. There is no end-user
    field, no output cap and no stream."""
    body = {name: value for name, value in payload.items() if name not in OWNED}
    body["model"] = upstream_model
    return orjson.dumps(body)


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    # OpenAI reports no usage (its moderation is free); a vendor that does is billed by it.
    usage = data.get("usage") or {}
    tokens = usage.get("prompt_tokens") or usage.get("input_tokens") or 0
    return Completion(
        shape=MODERATIONS,
        data=data,
        text="",
        finish_reason="stop",
        usage=Usage(input_tokens=int(tokens)),
        model=model,
    )


# ---- client side ----


def render_completion(c: Completion, *, request_id: str, req: ModelRequest) -> bytes:
    return orjson.dumps({**c.data, "model": c.model})


def stream_renderer(req: ModelRequest, *, request_id: str, model: str) -> NoReturn:
    """Refuse: a moderations answer is never streamed (parse_request never asks for one)."""
    raise ValueError("A moderations answer is never streamed.")


class ModerationsShape:
    """The moderations shape, as the pipeline (ClientShape) and the adapters (VendorShape)
    use it."""

    parse_request = staticmethod(parse_request)
    render_completion = staticmethod(render_completion)
    stream_renderer = staticmethod(stream_renderer)
    vendor_body = staticmethod(vendor_body)
    completion_from_vendor = staticmethod(completion_from_vendor)


MODERATIONS_SHAPE = ModerationsShape()
