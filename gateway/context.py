"""What one request carries through the pipeline, and the trail it leaves."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.auth import Principal
from gateway.plan import Plan
from gateway.types import ChatRequest, Usage


@dataclass(slots=True)
class TrailEntry:
    order: int
    provider: str
    model: str
    served_by: str
    source: str
    outcome: (
        str  # ok | upstream_error | timeout | circuit_open | chain_locked | keys_exhausted | ...
    )
    upstream_status: int | None = None
    latency_ms: int = 0
    reservation_id: int | None = None


@dataclass(slots=True)
class Meter:
    """Bytes through the HTTP layer, and whether an upstream call was actually sent."""

    bytes_in: int = 0
    bytes_out: int = 0
    upstream_sent: bool = False


@dataclass(slots=True)
class RequestContext:
    request_id: str  # minted by the gateway: keys every book of the request
    endpoint: str  # "chat", "messages", "internal.complete", ...
    meter: Meter
    client_request_id: str = ""  # the client's X-Request-Id: a label, never a key
    started: float = field(default_factory=time.monotonic)
    principal: Principal | None = None
    caller_label: str | None = None
    req: ChatRequest | None = None
    plan: Plan | None = None
    trail: list[TrailEntry] = field(default_factory=list)
    # Filled when an attempt serves the answer:
    served_provider: str = ""
    served_model: str = ""
    served_by: str = ""
    input_micro_per_mtok: int = 0
    output_micro_per_mtok: int = 0
    usage: Usage = field(default_factory=Usage)
    ttft_ms: int | None = None
    status: int = 200
    error_code: str = ""
    streamed: bool = False
    # Money holds taken for this request (billing fills these in).
    spend_hold_micro: int = 0
    spend_hold_taken: bool = False
    platform_call_marked: bool = False  # the hold records a platform call as sent
    reservation_id: int | None = None
    reservation_micro: int = 0
    admission: object = None  # gateway.limits.Admission once admitted
    provider_cost_micro: int = 0
    bandwidth_charge_micro: int = 0

    @property
    def caller_budgeted(self) -> bool:
        return bool(
            self.caller_label
            and self.principal
            and self.principal.caller_budget_max_micro is not None
        )

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)
