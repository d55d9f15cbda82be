"""POST /v1/messages/count_tokens: Anthropic's count-tokens API, answered `{"input_tokens": N}`.

Authenticated with a virtual key exactly as /v1/messages; the model is resolved through the
catalog (an alias or a "profile/model" pin too; a route list "a,b" counts for its first
model): unknown is LM-2001, not allowed for the key LM-1003. The offer counted for is the
one a chat request would try first (the cheapest, ranked as gateway/plan.py ranks a
fan-out).

N is the vendor's count when that offer's profile is of kind `anthropic` and a key is
usable, chosen as the attempt plan chooses: a usable key of the group's team pool for the
profile, else (no pool, or its fallback on) the platform key when platform serving is on
(GATEWAY_PTB_ENABLED) and the profile allows it. The body goes to the vendor's
`/v1/messages/count_tokens` with the upstream model name, without `fallback_model` and
`metadata`. Otherwise, or when that call fails or takes over VENDOR_TIMEOUT_S, N is
`estimate_input_tokens`. The answer says which in `x-tollgate-count: vendor|estimate`.

Never billed: no usage row, hold, reservation or wallet entry. Not rate limited either (no
request-rate window, token window or in-flight slot is taken); only the failed-lookup limit
on unknown keys applies, as on every authenticated route. A failing vendor call benches no
team key and opens no breaker: the answer is then the estimate.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import math
import re
from typing import TYPE_CHECKING

import orjson

from core import errors
from gateway.adapters.base import ProviderError
from gateway.attempts import platform_serves, team_pool
from gateway.auth import Principal, bearer
from gateway.catalog import ModelOffer, Profile
from gateway.pipeline import parse_json
from gateway.plan import offers_for
from gateway.runtime import runtime

if TYPE_CHECKING:  # the plumbing hands its exchange in
    from gateway.asgi import Exchange

log = logging.getLogger(__name__)

VENDOR_TIMEOUT_S = 5.0
COUNT_HEADER = b"x-tollgate-count"
BYTES_PER_TOKEN = 4
IMAGE_TOKENS = 1_600  # Anthropic's cost of an image at its largest size (about 1.15 MP)
PAGE_TOKENS = 1_600  # a document page: its text and its picture, roughly
# A PDF's page objects; "/Pages" (the page tree) is not one.
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
DROPPED_FIELDS = ("fallback_model", "metadata")


async def serve(ex: Exchange) -> None:
    """Answer one count: refusals in the error shape of the route, never a charge."""
    try:
        principal = await runtime.principals.for_secret(
            bearer(ex.headers), client=ex.scope.get("client")
        )
        body = _parse(await ex.read_body())
        offer = _offer_for(body["model"], principal)
    except errors.GatewayError as exc:
        await ex.refuse(exc)
        return
    tokens = await _vendor_count(body, offer, principal)
    source = b"vendor"
    if tokens is None:
        tokens, source = estimate_input_tokens(body), b"estimate"
    await ex.reply(200, orjson.dumps({"input_tokens": tokens}), [(COUNT_HEADER, source)])


def _parse(raw: bytes) -> dict:
    body = parse_json(raw)
    if not isinstance(body.get("model"), str) or not body["model"].strip():
        raise errors.InvalidRequest("'model' is required.")
    if not isinstance(body.get("messages"), list):
        raise errors.InvalidRequest("'messages' must be a list.")
    return body


def _offer_for(model: str, principal: Principal) -> ModelOffer:
    """Return the offer a chat request for `model` would try first (LM-2001 / LM-1003)."""
    return offers_for(model.split(",")[0].strip(), principal, runtime.catalog)[0]


async def _vendor_count(body: dict, offer: ModelOffer, principal: Principal) -> int | None:
    """Return the vendor's count, or None when there is none to ask or it failed."""
    profile = offer.profile
    count = getattr(profile.adapter, "count_tokens", None)
    if profile.kind != "anthropic" or count is None:
        return None
    api_key = await _usable_key(profile, principal.group_id)
    if api_key is None:
        return None
    upstream = {k: v for k, v in body.items() if k not in DROPPED_FIELDS}
    upstream["model"] = offer.upstream
    try:
        async with asyncio.timeout(VENDOR_TIMEOUT_S):
            return await count(upstream, api_key)
    except (ProviderError, TimeoutError) as exc:
        log.info("count_tokens on %s: %s; answering the estimate", profile.name, exc)
        return None


async def _usable_key(profile: Profile, group_id: int) -> str | None:
    """Pick the key a chat request's first attempt would use, as the attempt plan does."""
    pool = team_pool(profile, group_id, runtime.pools.get)
    if pool is not None:
        candidates = await runtime.keys.candidates(pool)
        if candidates:
            return candidates[0].secret
        if not pool.fallback:  # the group's traffic never silently reaches platform keys
            return None
    return profile.platform_key if platform_serves(profile) else None


# ---------------------------------------------------------------- the estimate


def estimate_input_tokens(body: dict) -> int:
    """Estimate a request's input tokens without asking anyone.

    ceil(B / 4) + 1,600 x (images + document pages), where B is the UTF-8 bytes of the text
    a model reads in `system`, `messages` and `tools`:
    - a string, a `text` block's text, a `thinking` block's thinking;
    - a `tool_use` block's name and its input as compact JSON; a `tool_result`'s content;
    - a document's text (`text` source) or content blocks (`content` source); a base64 PDF
      counts its pages (its `/Type /Page` objects, at least 1), any other document 1 page;
    - each image block 1,600 tokens;
    - a tool, and any other block, as its compact JSON.
    Roles and the model name count nothing.
    """
    tally = _Tally()
    tally.content(body.get("system"))
    for message in body.get("messages") or ():
        if isinstance(message, dict):
            tally.content(message.get("content"))
    for tool in body.get("tools") or ():
        tally.text_bytes += len(orjson.dumps(tool))
    return (
        math.ceil(tally.text_bytes / BYTES_PER_TOKEN)
        + IMAGE_TOKENS * tally.images
        + (PAGE_TOKENS * tally.pages)
    )


class _Tally:
    def __init__(self) -> None:
        self.text_bytes = 0
        self.images = 0
        self.pages = 0

    def text(self, value: object) -> None:
        if isinstance(value, str):
            self.text_bytes += len(value.encode())

    def content(self, content: object) -> None:
        if isinstance(content, str):
            self.text(content)
        elif isinstance(content, list):
            for block in content:
                self.block(block)

    def block(self, block: object) -> None:
        if isinstance(block, str):
            self.text(block)
            return
        if not isinstance(block, dict):
            return
        kind = block.get("type")
        if kind == "text":
            self.text(block.get("text"))
        elif kind == "thinking":
            self.text(block.get("thinking"))
        elif kind == "image":
            self.images += 1
        elif kind in ("tool_use", "server_tool_use"):
            self.text(block.get("name"))
            self.text_bytes += len(orjson.dumps(block.get("input", {})))
        elif kind == "tool_result":
            self.content(block.get("content"))
        elif kind == "document":
            self.document(block.get("source"))
        else:
            self.text_bytes += len(orjson.dumps(block))

    def document(self, source: object) -> None:
        source = source if isinstance(source, dict) else {}
        if source.get("type") == "text":
            self.text(source.get("data"))
        elif source.get("type") == "content":
            self.content(source.get("content"))
        elif source.get("type") == "base64" and isinstance(source.get("data"), str):
            self.pages += pdf_pages(source["data"])
        else:
            self.pages += 1


def pdf_pages(data_b64: str) -> int:
    """Count the page objects of a base64 PDF (at least 1: compressed ones are not seen)."""
    try:
        pdf = base64.b64decode(data_b64, validate=False)
    except (binascii.Error, ValueError):
        return 1
    return max(1, len(_PDF_PAGE.findall(pdf)))
