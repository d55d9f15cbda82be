"""Requests the gateway makes for one of its own: a moderation guardrail's check.

Such a request is served like any client's, on the same key: its own plan (the key's model
access, team keys before platform keys), its limits, its hold, its vendor call through the
orchestrator (retries, breakers, fallback), its usage row and so its receipt. Only the
exchange is missing: nothing is read from or written to a client. Its row names the request
it was made for in `client_request_id` (the label a client's X-Request-Id takes), so a
request's checks are found next to it; it keeps the request's caller label and tags.

Its deadline is its own (the guardrail's), within the request's: past it, the call is
abandoned as LM-5002 (a timeout) and recorded as such.
"""

from __future__ import annotations

import asyncio
import time

from core import errors
from core.ids import time_ordered_id
from gateway import tracing
from gateway.context import Meter, ModelContext
from gateway.holding import hold
from gateway.recording import record_and_release, usage_record
from gateway.runtime import runtime
from gateway.stages import CRASHED, Ending, admit, deadline_left_s, end_books, plan_request
from gateway.types import Completion, ModelRequest


async def call_within(
    parent: ModelContext,
    endpoint: str,
    req: ModelRequest,
    *,
    deadline_s: float,
    request_id: str | None = None,
) -> Completion:
    """Serve `req` for `parent` on its key, as endpoint `endpoint` (its id `request_id`, or
    a new one); return the vendor's answer. Raises GatewayError (a refusal, a vendor failure,
    the deadline) once it is recorded."""
    ctx = ModelContext(
        request_id=request_id or time_ordered_id(),
        client_request_id=parent.request_id,
        endpoint=endpoint,
        meter=Meter(),
        started=time.monotonic(),
        principal=parent.principal,
        caller_label=parent.caller_label,
        tags=parent.tags,
        req=req,
    )
    ending = CRASHED
    try:
        plan = plan_request(ctx, req)
        ticket = await admit(ctx, plan)
        await hold(ctx, plan, ticket)
        try:
            async with asyncio.timeout(min(deadline_s, deadline_left_s(parent))):
                completion = await runtime.orchestrator.complete(ctx, first_ticket=ticket)
        except TimeoutError:
            raise errors.UpstreamTimeout("The check passed its deadline.") from None
        ctx.usage = completion.usage
        ending = Ending()
        return completion
    except errors.GatewayError as exc:
        ending = Ending.of_error(exc)
        raise
    finally:
        await end_books(ctx, ending)
        record = usage_record(ctx, bytes_out=0)
        await record_and_release(ctx, record)
        tracing.finished(ctx, record)
