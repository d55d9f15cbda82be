"""A request's tags (core/tags.py): its own (the `X-Tollgate-Tags` header, and the body's
`metadata.tags` where the client shape has one), then its key's and group's default tags.
Tags that break the rules are refused (LM-2001), never dropped silently; defaults that do
not fit beside the request's own are left off."""

from __future__ import annotations

from collections.abc import Iterable

from core import errors
from core.tags import TagError, clean_tags, merge_tags
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
