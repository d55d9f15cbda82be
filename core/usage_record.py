"""The usage record: one finished request, as every part of Tollgate sees it.

The gateway builds it (gateway/recording.py), the usage writer journals and stores it
(usage/writer.py; its fields are UsageLog's columns, its attempts one more, packed by
usage/trail.py), billing settles it (billing/settlement.py: `reservation_id` names the wallet
reservation to commit), and the admin and the tenant API show its fields. It lives in core
because those layers import only downwards, and all of them need it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime

import orjson


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One try of the attempt trail: a call made, or a link refused before any call."""

    order: int
    provider: str
    model: str
    served_by: str  # "team" | "platform" | "" (no attempt reached)
    source: str  # e.g. "openai-main:gpt-4o-mini:team"
    outcome: str  # ok | upstream_error | timeout | circuit_open | chain_locked | ...
    upstream_status: int | None = None
    latency_ms: int = 0
    reservation_id: int | None = None  # the wallet reservation this try held
    key_label: str = ""  # the key that made the call (team, pooled platform), by its label


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What one request used and owes. Never its prompt or its answer."""

    request_id: str  # minted by the gateway: keys the request's books
    client_request_id: str  # the client's X-Request-Id: a label only
    created_at: datetime
    account_id: int | None
    group_id: int | None
    api_key_id: int | None
    caller_label: str
    endpoint: str  # "chat", "internal.complete", "web.scrape", ... (column and API: "route")
    model_requested: str
    model_served: str
    provider: str
    served_by: str
    tokens_in: int  # platform-served tokens (priced)
    tokens_out: int
    byok_tokens_in: int  # team-served tokens (cost 0)
    byok_tokens_out: int
    provider_cost_micro: int
    bytes_in: int
    bytes_out: int
    bandwidth_charge_micro: int
    upstream_sent: bool
    status: int
    error_code: str
    latency_ms: int
    ttft_ms: int | None
    streamed: bool
    reservation_id: int | None  # the served attempt's wallet reservation: settlement commits it
    # Of the tokens above (platform or team), those the vendor read from or wrote to its
    # prompt cache, and the output it spent reasoning: each priced at its own rate.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    # Web acquisition units, counted whoever served them (platform or team key), as tokens
    # are; provider_cost_micro stays the platform-served cost only. The action is `endpoint`
    # ("web.scrape", "web.search", "web.crawl", "web.crawl.page", "internal.scrape", ...).
    web_pages: int = 0  # fetched without rendering: our direct fetcher, or a vendor's
    web_rendered_pages: int = 0  # rendered with JavaScript by a rendering vendor
    web_queries: int = 0  # search queries
    web_url: str = ""  # the page a scrape or crawl page asked for (the tenant's own label)
    # The message an error told the client, exactly (bounded by its column): our own text,
    # or for LM-2002 the vendor's refusal as the adapter cleaned it of any credential.
    error_message: str = ""
    # The response cache (gateway/cache/): "hit", "miss" or "bypass" on its routes, "" off
    # them; a hit's `provider_cost_micro` is its cache price, and this what the vendor call
    # it replays cost (at the served offer's prices, whoever paid): the money it saved.
    cache_status: str = ""
    uncached_cost_micro: int = 0
    # The request's tags (core/tags.py): its own, then its key's and group's defaults.
    # Labels the tenant chose: they split its usage, and key nothing of the books.
    tags: tuple[str, ...] = ()
    # What each guardrail that ran did (gateway/guarding.py): {"guardrail", "phase",
    # "action", "matches"} each, the number of values found and never the values; and
    # "failed": true where a webhook gave no verdict and failed open (nothing was checked).
    guardrails: tuple[dict, ...] = ()
    attempts: tuple[AttemptRecord, ...] = ()
    # The prices the served attempt was charged at (`input_micro_per_mtok`, ..., or a web
    # unit's `page_micro`, ...): its receipt states them (billing/receipts.py); not a column.
    prices: dict[str, int] = field(default_factory=dict)

    def log_columns(self) -> dict:
        """Return the UsageLog columns of this record (everything but the attempts)."""
        return {name: getattr(self, name) for name in LOG_FIELDS}

    def to_json(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str) -> UsageRecord:
        """Decode a journal entry; raise ValueError / TypeError / KeyError when it is not one."""
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("the journal entry is not a JSON object")
        return cls._from_owned(data)

    @classmethod
    def from_dict(cls, data: dict) -> UsageRecord:
        return cls._from_owned(dict(data))

    @classmethod
    def _from_owned(cls, data: dict) -> UsageRecord:
        """Build a record from a dict this call may change."""
        attempts = tuple(AttemptRecord(**attempt) for attempt in data.pop("attempts", ()))
        if "route" in data:  # journaled by a release before the endpoint was named so
            data["endpoint"] = data.pop("route")
        if "reservation_id" not in data:  # the same: the served attempt named it
            data["reservation_id"] = next(
                (a.reservation_id for a in attempts if a.outcome == "ok" and a.reservation_id),
                None,
            )
        data["tags"] = tuple(data.get("tags") or ())  # JSON's list; absent before tags
        data["guardrails"] = tuple(data.get("guardrails") or ())  # the same
        created_at = data.pop("created_at")
        if isinstance(created_at, str):
            created_at = datetime.fromisoformat(created_at)
        if not isinstance(created_at, datetime):
            raise TypeError("created_at is not a date-time")
        return cls(created_at=created_at, attempts=attempts, **data)


ATTEMPT_FIELDS = tuple(f.name for f in fields(AttemptRecord))
LOG_FIELDS = tuple(f.name for f in fields(UsageRecord) if f.name not in ("attempts", "prices"))
# What a tenant sees of its rows (the API, the CSV export): the books' plumbing stays out.
TENANT_FIELDS = tuple(f for f in LOG_FIELDS if f not in ("upstream_sent", "reservation_id"))
WEB_UNIT_FIELDS = ("web_pages", "web_rendered_pages", "web_queries")
