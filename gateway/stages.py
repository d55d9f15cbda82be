"""The stages every model request runs, whoever asked for it: its plan, its admission and
the end of its books. The pipeline (gateway/pipeline.py) runs them for a client's request,
gateway/subrequests.py for a request the gateway makes for one of its own (a moderation
guardrail's check); both end in an `Ending`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from core import errors, metrics
from core.config import tollgate
from gateway.admission import limit_scopes
from gateway.breakers import Ticket
from gateway.context import ModelContext, RequestContext
from gateway.plan import Plan, build_plan, output_bound, prompt_bound
from gateway.runtime import runtime
from gateway.types import ModelRequest

# The stages run in order, so what an earlier stage set is there for the later ones: the
# principal and the request (`accept`), the admission (`admit`, released only by `finish`).
# The asserts below say so to the type checker.
ACCEPTED = "a later stage ran before accept"
ADMITTED = "a later stage ran before admit"


@dataclass(frozen=True, slots=True)
class Ending:
    """How a request ends: status and code for its books, and its last bytes, if any."""

    status: int = 200
    error_code: str = ""
    final: bytes | None = None  # the last body bytes; None: only end the body
    headers: tuple[tuple[bytes, bytes], ...] = ()  # when no response has started yet
    error_message: str = ""  # what the client was told: the usage row keeps it

    @classmethod
    def of_error(cls, exc: errors.GatewayError, **rest) -> Ending:
        """End with an error: its status, its code and the message the client reads."""
        return cls(exc.status, exc.code, error_message=exc.message, **rest)


CLIENT_CLOSED = Ending(499, "client_closed")
# A bug: recorded, then the ASGI app answers 500 with the base error's message.
CRASHED = Ending(500, "internal", error_message=errors.GatewayError.default_message)


def plan_request(ctx: ModelContext, req: ModelRequest) -> Plan:
    """Build the attempt plan (LM-2001 / LM-1003 for unknown or forbidden models)."""
    assert ctx.principal is not None, ACCEPTED
    ctx.plan = build_plan(req, ctx.principal, runtime.catalog, runtime.pools.get)
    return ctx.plan


async def admit(ctx: ModelContext, plan: Plan, *, also: tuple[tuple, ...] = ()) -> Ticket | None:
    """Admit the request against its limits and caps (LM-3001 / LM-3002 / LM-3003).

    The same Redis round trip reads the first link's breaker; when it is closed and clean
    the breakers grant that link's ticket now, and its call needs no round trip of its own.
    `also`: more commands for that round trip (the response cache's lookup).
    """
    principal, req = ctx.principal, ctx.req
    assert principal is not None and req is not None, ACCEPTED
    first = plan.links[0] if plan.links and plan.links[0].calls_upstream else None
    ctx.admission = await runtime.limiter.admit(
        request_id=ctx.request_id,
        group_id=principal.group_id,
        scopes=limit_scopes(ctx),
        concurrency=principal.group_concurrency,
        lease_s=max((link.offer.profile.timeout_s for link in plan.links), default=60) + 30,
        # Reserved in the token counts until the finish trues it up: a burst cannot pass TPM.
        tokens_estimate=prompt_bound(req)
        + max((output_bound(req, link.max_tokens) for link in plan.links), default=0),
        peek=runtime.breakers.peek(first.breaker_key, first.offer.name) if first else None,
        also=also,
    )
    metrics.IN_FLIGHT.inc()
    if first is None:
        return None
    return runtime.breakers.ticket_from_peek(
        first.breaker_key, first.offer.name, ctx.admission.peeked
    )


def deadline_left_s(ctx: RequestContext) -> float:
    """Return what is left of the request's overall deadline (reservations outlive it)."""
    return ctx.started + tollgate().request_deadline_s - time.monotonic()


async def end_books(ctx: RequestContext, ending: Ending) -> None:
    """Close what a request's end closes before its record: the reservation taken ahead for a
    call never made goes back, and the request says how it ended and what it used."""
    if ctx.money is not None:
        await ctx.money.close()
    ctx.status, ctx.error_code = ending.status, ending.error_code
    ctx.error_message = ending.error_message
    if isinstance(ctx, ModelContext) and ctx.stream is not None:
        ctx.usage = ctx.stream.billed_usage()
    if ctx.admission is not None:
        metrics.IN_FLIGHT.dec()
