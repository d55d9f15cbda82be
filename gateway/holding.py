"""The pipeline's hold stage (gateway/pipeline.py, stage 4): a request's money handle opened
and its worst case held on the budgets that bound it, before any vendor is called. Model
requests, cache hits and web actions all hold here."""

from __future__ import annotations

from billing.ledger.fused import FirstReservation
from billing.ledger.holds import CallerBudget, Hold
from gateway.attempts import Attempt
from gateway.breakers import Ticket
from gateway.context import RequestContext
from gateway.plan import Plan
from gateway.runtime import runtime
from gateway.tags import tag_holds
from gateway.web.plan import WebPlan
from usage.pseudonym import window_id

ACCEPTED = "the hold ran before accept"


async def hold(
    ctx: RequestContext,
    plan: Plan | WebPlan,
    first_ticket: Ticket | None = None,
    *,
    estimate_micro: int | None = None,
    first: Attempt | None = None,
) -> None:
    """Open the request's money handle and hold the plan's worst case on the budgets that
    bound this request (LM-4001).

    When the first call is sure to be a platform attempt on the wallet (the first link's
    breaker already let it through), its reservation is asked for with the hold: one commit
    before the vendor call instead of two. A cache hit holds its own price instead
    (`estimate_micro`), with its wallet cover (`first`).
    """
    principal = ctx.principal
    assert principal is not None, ACCEPTED
    amount = plan.budget_estimate_micro if estimate_micro is None else estimate_micro
    ctx.money = runtime.escrow.open_request(
        request_id=ctx.request_id,
        account_id=principal.account_id,
        group_id=principal.group_id,
        api_key_id=principal.api_key_id,
        estimate_micro=amount,
    )
    tags = tag_holds(principal, ctx.tags)
    if not (principal.has_budget or ctx.caller_budgeted or tags):
        return
    caller_budget = principal.caller_budget_max_micro
    caller = (
        CallerBudget(
            group_id=principal.group_id,
            label=ctx.caller_label,
            period=window_id(),
            budget_max_micro=caller_budget,
        )
        if ctx.caller_label and caller_budget is not None  # ctx.caller_budgeted
        else None
    )
    if estimate_micro is None:
        first = first_call_on_wallet(plan, first_ticket)
    elif first is not None and not first.needs_escrow:
        first = None
    with_hold = (
        FirstReservation(principal.account_id, principal.api_key_id, first.escrow_budget_micro)
        if first is not None
        else None
    )
    await ctx.money.hold(
        Hold(
            request_id=ctx.request_id,
            group_id=principal.group_id,
            api_key_id=principal.api_key_id,
            key_budgeted=principal.key_budget_max_micro is not None,
            amount_micro=amount,
            caller=caller,
            tags=tags,
        ),
        first=with_hold,
        first_call=first,
    )


def first_call_on_wallet(plan: Plan | WebPlan, first_ticket: Ticket | None) -> Attempt | None:
    """Return the attempt the first vendor call is sure to be, when it reserves the wallet."""
    if first_ticket is None:  # the first link's breaker has not let it through (yet)
        return None
    attempt = plan.links[0].attempts[0]
    return attempt if attempt.needs_escrow else None
