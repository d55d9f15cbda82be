"""A request's tags (core/tags.py): its own (the `X-Tollgate-Tags` header, and the body's
`metadata.tags` where the client shape has one), then its key's and group's default tags.
Tags that break the rules are refused (LM-2001), never dropped silently; defaults that do
not fit beside the request's own are left off."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.utils import timezone

from accounts.periods import period_key
from billing.tag_ledger import TagHold
from core import errors
from core.tags import TagError, clean_tags, merge_tags
from gateway.auth import Principal
from gateway.context import RequestContext

TAG_HEADER = b"x-tollgate-tags"


def tag_request(
    ctx: RequestContext, header: bytes | None, body_tags: Iterable[object] = ()
) -> None:
    """Set `ctx.tags`: the request's own tags first, then the principal's defaults."""
    principal = ctx.principal
    assert principal is not None, "tags are read after authentication"
    sent = [item for item in header.decode("latin-1").split(",") if item.strip()] if header else []
    try:
        own = clean_tags([*sent, *body_tags])
    except TagError as exc:
        raise errors.InvalidRequest(str(exc)) from None
    ctx.tags = merge_tags(own, principal.default_tags) if principal.default_tags else own


def tag_holds(
    principal: Principal, tags: tuple[str, ...], now: datetime | None = None
) -> tuple[TagHold, ...]:
    """The request's tags that carry a budget (its account's, loaded with the principal: no
    query), each with its current period's key in the account's time zone (at `now`)."""
    if not principal.tag_budgets or not tags:
        return ()
    now = now or timezone.now()
    return tuple(
        TagHold(
            tag=limit.tag,
            period=period_key(limit.budget_period, principal.time_zone, now),
            account_id=principal.account_id,
            budget_max_micro=limit.budget_max_micro,
            budget_period=limit.budget_period,
            time_zone=principal.time_zone,
        )
        for limit in principal.tag_budgets
        if limit.tag in tags
    )
