"""What one request carries through the pipeline (gateway/pipeline.py), and what it leaves."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from core.usage_record import AttemptRecord
from gateway.auth import Principal
from gateway.catalog import ModelOffer
from gateway.limits import Admission
from gateway.plan import Attempt, Plan
from gateway.types import ModelRequest, StreamResult, Usage
from gateway.web.types import WebBill


@dataclass(slots=True)
class Meter:
    """Bytes through the HTTP layer, and whether an upstream call was actually sent."""

    bytes_in: int = 0
    bytes_out: int = 0
    upstream_sent: bool = False


@dataclass(frozen=True, slots=True)
class Served:
    """The attempt that answered: who served it, at what prices, on which reservation."""

    offer: ModelOffer  # its provider, model and prices
    served_by: str  # plan.TEAM or plan.PLATFORM
    reservation_id: int | None  # the wallet reservation settlement commits

    @property
    def provider(self) -> str:
        return self.offer.profile.name

    @property
    def model(self) -> str:
        return self.offer.name


@dataclass(slots=True)
class RequestContext:
    request_id: str  # minted by the gateway: keys every book of the request
    endpoint: str  # "chat", "messages", "internal.complete", ...
    meter: Meter
    client_request_id: str = ""  # the client's X-Request-Id: a label, never a key
    started: float = field(default_factory=time.monotonic)
    principal: Principal | None = None
    caller_label: str | None = None
    req: ModelRequest | None = None
    plan: Plan | None = None  # a web action's: gateway.web.plan.WebPlan
    admission: Admission | None = None  # until the finish releases it
    trail: list[AttemptRecord] = field(default_factory=list)
    served: Served | None = None
    usage: Usage = field(default_factory=Usage)
    web: WebBill | None = None  # a web action's units and cost (gateway/web/)
    stream: StreamResult | None = None  # a streamed answer as far as it got
    ttft_ms: int | None = None
    # The budget hold: taken (a row exists) and marked as covering a sent platform call.
    hold_taken: bool = False
    call_marked: bool = False
    # The first call's wallet reservation when the hold took it too: (its attempt, its id),
    # until the orchestrator runs that attempt on it (else the finish cancels it).
    reserved_ahead: tuple[Attempt, int] | None = None
    # How the request ended (set once, by the pipeline's finish).
    status: int = 200
    error_code: str = ""

    @property
    def caller_budgeted(self) -> bool:
        return bool(
            self.caller_label
            and self.principal
            and self.principal.caller_budget_max_micro is not None
        )

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)
