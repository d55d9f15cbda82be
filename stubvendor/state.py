"""What one stub app holds: its calls log, fault queue and prompt caches (StubState, kept
under the STATE key), and the fault kinds the queue takes."""

from __future__ import annotations

import contextvars
import itertools
from typing import Any

from aiohttp import web

# Refusals of the request itself (the vendor's 4xx a client can fix): kind -> status.
REFUSAL_KINDS = {"400": 400, "404": 404, "413": 413, "422": 422}
REFUSAL_MESSAGE = "The request was refused (stub fault)."
REFUSAL_MESSAGE_MAX_CHARS = 10_000
FAULT_KINDS = frozenset(
    {
        "429",
        "401",
        "403",
        "500",
        *REFUSAL_KINDS,
        "hang",
        "fail_before_first_token",
        "fail_after_tokens",
        "slow",
        "ignore_cap",
    }
)

# The <n> of response and tool call ids: process-wide, never reset.
_ids = itertools.count(1)


class StubState:
    """Hold one app's calls log, fault queue and prompt caches."""

    def __init__(self, accept_keys: frozenset[str] | None) -> None:
        self.accept_keys = accept_keys
        self.calls: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        # (model, digest of a message prefix) seen by earlier OpenAI calls
        self.openai_prefixes: set[tuple[str, bytes]] = set()
        # the same for Responses API input items (apart: they are not chat messages)
        self.responses_prefixes: set[tuple[str, bytes]] = set()
        # (model, digest of a cache_control prefix) written by earlier Anthropic calls
        self.anthropic_prefixes: set[tuple[str, bytes]] = set()
        # Gemini / Vertex (stubvendor/gemini.py): content prefixes seen (cleared like the
        # others); tokens issued (token -> (service account, expiry)) and public keys
        # registered by email, both kept across clears (a gateway keeps its token).
        self.gemini_prefixes: set[tuple[str, bytes]] = set()
        self.google_tokens: dict[str, tuple[str, float]] = {}
        self.google_keys: dict[str, dict[str, Any]] = {}

    def record(self, body: Any = None, **fields: Any) -> dict[str, Any]:
        call = {
            "seq": len(self.calls) + 1,
            **fields,
            "fault": None,
            "status": None,
            "body": body,
            "traceparent": INBOUND_TRACEPARENT.get(),
        }
        self.calls.append(call)
        return call

    def take_fault(self, key: str | None, model: str | None) -> dict[str, Any] | None:
        for i, fault in enumerate(self.faults):
            match = fault["match"]
            if "key" in match and match["key"] != key:
                continue
            if "model" in match and match["model"] != model:
                continue
            fault["times"] -= 1
            if fault["times"] <= 0:
                del self.faults[i]
            return fault
        return None

    def clear(self) -> None:
        self.calls.clear()
        self.faults.clear()
        self.openai_prefixes.clear()
        self.responses_prefixes.clear()
        self.anthropic_prefixes.clear()
        self.gemini_prefixes.clear()


STATE = web.AppKey("stub_state", StubState)


# The W3C traceparent of the call being handled: every recorded call lists it.
INBOUND_TRACEPARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "stub_inbound_traceparent", default=None
)
