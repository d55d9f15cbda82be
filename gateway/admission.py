"""What an admission holds (gateway/limits.py judges it): the rate scopes it counts in, the
fleet-wide in-flight cap it took a slot of, and the rate-limit headers it answers.

Two in-flight caps, one per kind of outbound work (the seed's bulkheads, `model-gateway:
inflight` and `web-fetch:inflight`): model requests take slots of TOLLGATE_INFLIGHT_MAX,
web actions (scrape, search) of TOLLGATE_WEB_INFLIGHT_MAX, each its own Redis sorted set.
A slow site holding every web slot leaves the model routes' slots free, and the other way
round; either cap full refuses LM-3003.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.config import tollgate

if TYPE_CHECKING:
    from gateway.context import RequestContext

PREFIX = "tollgate:rl:"


@dataclass(frozen=True, slots=True)
class Bulkhead:
    """One fleet-wide in-flight cap: its name, its slots' Redis key and its setting."""

    name: str  # "model" or "web"
    key: str
    what: str  # the cap, as a refusal names it

    def cap(self) -> int:
        """Return the cap's size (0: no cap)."""
        conf = tollgate()
        return conf.web_inflight_max if self is WEB else conf.inflight_max


MODEL = Bulkhead("model", PREFIX + "inflight", "fleet in-flight cap")
WEB = Bulkhead("web", PREFIX + "inflight:web", "fleet in-flight cap of web actions")


# A hash to read in the admission's script: its key and fields (one round trip for both).
Peek = tuple[str, tuple[str, ...]]
# The rate-limit headers by API: requests limit, remaining, reset; tokens limit, remaining,
# reset. Not Anthropic's input- and output-token variants: our limits count a request's
# tokens together.
OPENAI_NAMES = (
    b"x-ratelimit-limit-requests",
    b"x-ratelimit-remaining-requests",
    b"x-ratelimit-reset-requests",
    b"x-ratelimit-limit-tokens",
    b"x-ratelimit-remaining-tokens",
    b"x-ratelimit-reset-tokens",
)
ANTHROPIC_NAMES = (
    b"anthropic-ratelimit-requests-limit",
    b"anthropic-ratelimit-requests-remaining",
    b"anthropic-ratelimit-requests-reset",
    b"anthropic-ratelimit-tokens-limit",
    b"anthropic-ratelimit-tokens-remaining",
    b"anthropic-ratelimit-tokens-reset",
)


@dataclass(frozen=True, slots=True)
class Scope:
    name: str  # "key:12", "group:3", "caller:3:<label>"
    rpm: int  # 0: no limit
    tpm: int


@dataclass(slots=True)
class Admission:
    request_id: str
    group_id: int
    scopes: tuple[Scope, ...]
    window: int
    in_shared: bool
    bulkhead: Bulkhead
    tokens_estimate: int = 0  # reserved at admission, trued up by the finish
    requests_used: list[int] = field(default_factory=list)
    tokens_used: list[int] = field(default_factory=list)
    peeked: list | None = None  # the fields of the caller's `peek` (None: Redis did not judge)
    # The replies of the caller's extra commands (`also`) in the same round trip; None when
    # Redis did not judge (they were not sent).
    also_replies: list | None = None
    resets_at: int = 0  # when the window ends (Unix seconds)
    clock: Callable[[], float] = time.time

    def headers(
        self, tokens_consumed: int | None = None, *, anthropic: bool = False
    ) -> list[tuple[bytes, bytes]]:
        """Return the rate-limit and token headers of the tightest scope (key, group, caller):
        OpenAI's names (`x-ratelimit-limit-requests`, ..., reset as a duration: `45s`), or
        with `anthropic` Anthropic's (`anthropic-ratelimit-requests-limit`, ..., reset as the
        RFC 3339 time the window ends: `2025-01-01T00:01:00Z`)."""
        out: list[tuple[bytes, bytes]] = []
        if anthropic:
            names = ANTHROPIC_NAMES
            reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.resets_at)).encode()
        else:
            names = OPENAI_NAMES
            reset = str(max(1, self.resets_at - int(self.clock()))).encode() + b"s"
        requests = self._tightest([s.rpm for s in self.scopes], self.requests_used)
        if requests is not None:
            limit, used = requests
            out.append((names[0], str(limit).encode()))
            out.append((names[1], str(max(0, limit - used)).encode()))
            out.append((names[2], reset))
        tokens = self._tightest([s.tpm for s in self.scopes], self.tokens_used)
        if tokens is not None:
            limit, used = tokens
            remaining = str(max(0, limit - used - (tokens_consumed or 0))).encode()
            out.append((names[3], str(limit).encode()))
            out.append((names[4], remaining))
            out.append((names[5], reset))
            out.append((b"x-tokens-remaining", remaining))
        if tokens_consumed is not None:
            out.append((b"x-tokens-consumed", str(tokens_consumed).encode()))
        return out

    @staticmethod
    def _tightest(limits: list[int], used: list[int]) -> tuple[int, int] | None:
        """Return (limit, used) of the limited scope with the least room, or None."""
        best = None
        for limit, count in zip(limits, used, strict=False):
            if limit and (best is None or limit - count < best[0] - best[1]):
                best = (limit, count)
        return best


def limit_scopes(ctx: RequestContext) -> tuple[Scope, ...]:
    """Return the rate scopes of a request: its key, its group, and its end caller."""
    principal = ctx.principal
    assert principal is not None  # accepted: the caller is known
    scopes = []
    if principal.api_key_id is not None:
        scopes.append(
            Scope(f"key:{principal.api_key_id}", principal.key_rpm or 0, principal.key_tpm or 0)
        )
    scopes.append(
        Scope(f"group:{principal.group_id}", principal.group_rpm or 0, principal.group_tpm or 0)
    )
    if ctx.caller_label and (principal.caller_rpm or principal.caller_tpm):
        scopes.append(
            Scope(
                f"caller:{principal.group_id}:{ctx.caller_label}",
                principal.caller_rpm or 0,
                principal.caller_tpm or 0,
            )
        )
    return tuple(scopes)
