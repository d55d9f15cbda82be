"""What one request carries through the pipeline (gateway/pipeline.py), and what it leaves."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.usage_record import AttemptRecord
from gateway.admission import Admission
from gateway.auth import Principal
from gateway.catalog import ModelOffer
from gateway.plan import Plan
from gateway.types import ModelRequest, StreamResult, Usage
from gateway.web.plan import WebPlan
from gateway.web.types import WebBill

if TYPE_CHECKING:
    from billing.request_money import RequestMoney
    from gateway.cache.stage import CacheState
    from gateway.guarding import Verdict
    from gateway.tracing import RequestTrace


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
    served_by: str  # attempts.TEAM or attempts.PLATFORM
    reservation_id: int | None  # the wallet reservation settlement commits

    @property
    def provider(self) -> str:
        return self.offer.profile.name

    @property
    def model(self) -> str:
        return self.offer.name


@dataclass(slots=True)
class RequestContext:
    """What every request carries, model or web: who calls, its admission, its money, its
    attempt trail and how it ended."""

    request_id: str  # minted by the gateway: keys every book of the request
    endpoint: str  # "chat", "messages", "internal.complete", "web.scrape", ...
    meter: Meter
    client_request_id: str = ""  # the client's X-Request-Id: a label, never a key
    started: float = field(default_factory=time.monotonic)
    principal: Principal | None = None
    caller_label: str | None = None
    # The request's tags (core/tags.py): its own, then its key's and group's defaults. Labels
    # of the account's books (usage rows, tag budgets), never keys of anything else.
    tags: tuple[str, ...] = ()
    admission: Admission | None = None  # until the finish releases it
    money: RequestMoney | None = None  # opened by the hold stage, closed by the finish
    trail: list[AttemptRecord] = field(default_factory=list)
    # How the request ended (set once, by the pipeline's finish).
    status: int = 200
    error_code: str = ""
    error_message: str = ""  # the message the client was told (ours; LM-2002's is cleaned)
    # Seconds spent waiting on vendor calls (the overhead header is the rest), and what a
    # sampled request records for its trace (gateway/tracing.py); None: not sampled.
    vendor_s: float = 0.0
    trace: RequestTrace | None = None

    @property
    def caller_budgeted(self) -> bool:
        return bool(
            self.caller_label
            and self.principal
            and self.principal.caller_budget_max_micro is not None
        )

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


@dataclass(slots=True)
class ModelContext(RequestContext):
    """A model request's own: what it asked, its plan, what served it and what it used."""

    req: ModelRequest | None = None
    plan: Plan | None = None
    served: Served | None = None
    usage: Usage = field(default_factory=Usage)
    stream: StreamResult | None = None  # a streamed answer as far as it got
    ttft_ms: int | None = None
    cache: CacheState | None = None  # the response cache's part (its routes only)
    # What each guardrail that ran did (gateway/guarding.py): empty when none is attached.
    guardrail_verdicts: tuple[Verdict, ...] = ()

    @property
    def answer_rewritten(self) -> bool:
        """Say whether an output guardrail changed or withheld the answer: the client got
        other text than the vendor's, so the answer is not one to cache."""
        return any(
            verdict.phase == "output" and verdict.matches and verdict.action != "flag"
            for verdict in self.guardrail_verdicts
        )


@dataclass(slots=True)
class WebContext(RequestContext):
    """A web action's own: its plan and its bill (the units, their cost, its reservation)."""

    plan: WebPlan | None = None
    web: WebBill = field(default_factory=WebBill)
