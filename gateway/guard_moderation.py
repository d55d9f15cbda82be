"""A moderation guardrail's check: the texts sent to the moderation model it names, in
OpenAI's `/v1/moderations` shape, as a request of its own on the same key
(gateway/subrequests.py): its own plan (the key's access; a team's key before the
platform's), limits, hold, usage row (`guardrail.moderation`, labelled with the request it
checked) and receipt, priced per input token the vendor reports (OpenAI's own moderation
reports none and costs nothing).

A result counts as a finding when the model flags it (`flagged`), or, with a threshold, when
any category scores at or above it. The verdict's kinds are the categories found, each once
(they name what was found, never the text). A call that fails (the model unknown or not the
key's, a limit, the vendor down, the guardrail's deadline) is no verdict: the guardrail's
fail mode decides (gateway/guarding.py). The verdict names the check's own row (`check`:
its request id), answered or not.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core import errors
from core.ids import time_ordered_id
from gateway.guard_hooks import CheckOutcome
from gateway.shapes.moderations import parse_request
from gateway.subrequests import call_within

if TYPE_CHECKING:
    from gateway.context import ModelContext
    from guardrails.selectors import GuardrailSpec

ENDPOINT = "guardrail.moderation"  # its usage rows' endpoint


async def check_with_moderation(
    ctx: ModelContext, spec: GuardrailSpec, *, texts: list[str]
) -> CheckOutcome:
    """Ask the guardrail's moderation model about `texts`; never raises for its faults."""
    texts = [text for text in texts if text.strip()]
    if not texts:
        return CheckOutcome()  # nothing to judge: checked, nothing found
    check = time_ordered_id()  # its row's id: the verdict names it
    try:
        req = parse_request({"model": spec.moderation_model, "input": texts})
        answer = await call_within(
            ctx, ENDPOINT, req, deadline_s=spec.deadline_ms / 1000, request_id=check
        )
    except errors.GatewayError as exc:
        return CheckOutcome(failure=f"the moderation call failed: {exc.code}", check=check)
    return replace(read_results(answer.data.get("results"), spec.moderation_threshold), check=check)


def read_results(results: Any, threshold: float | None) -> CheckOutcome:
    """Read the model's results: how many texts it found something in, and what."""
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        return CheckOutcome(failure="the moderation answer had no results")
    found, kinds = 0, []
    for result in results:
        if threshold is None:
            categories = result.get("categories") or {}
            hits = [name for name, on in categories.items() if on is True]
            hit = result.get("flagged") is True
        else:
            scores = result.get("category_scores") or {}
            hits = [
                name
                for name, score in scores.items()
                if isinstance(score, (int, float)) and score >= threshold
            ]
            hit = bool(hits)
        if hit:
            found += 1
            kinds.extend(hits)
    return CheckOutcome(flagged=found > 0, matches=found, kinds=tuple(dict.fromkeys(kinds)))
