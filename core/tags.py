"""Request tags: labels a client, a key or a group puts on requests to split the bill.

A tag is untrusted: it labels usage rows, rollups, budgets and alerts of the account that
sent it, and never keys anything outside that account. The rules are the same wherever a tag
enters (the `X-Tollgate-Tags` header, `metadata.tags` in a body, a key's or a group's default
tags, a tag budget, an alert): lower-cased, 1-64 characters of `a-z 0-9 _ . : / -` starting
with a letter or digit, at most MAX_TAGS on one request, duplicates dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_TAGS = 10
MAX_TAG_CHARS = 64
_TAG = re.compile(r"[a-z0-9][a-z0-9_.:/-]{0,63}")
RULE = (
    f"a tag is 1-{MAX_TAG_CHARS} characters of a-z, 0-9, '_', '.', ':', '/', '-', starting "
    f"with a letter or digit; at most {MAX_TAGS} tags"
)


class TagError(ValueError):
    """A tag or a list of tags breaks the rules; the message says which and why."""


def clean_tag(value: object) -> str:
    """Return `value` as a tag (lower-cased, trimmed), or raise TagError."""
    if not isinstance(value, str):
        raise TagError(f"Tags are strings ({RULE}).")
    tag = value.strip().lower()
    if not _TAG.fullmatch(tag):
        shown = tag[:MAX_TAG_CHARS] + ("..." if len(tag) > MAX_TAG_CHARS else "")
        raise TagError(f"Tag {shown!r} is not valid: {RULE}.")
    return tag


def clean_tags(values: Iterable[object]) -> tuple[str, ...]:
    """Return the tags in first-seen order without duplicates, or raise TagError."""
    tags: dict[str, None] = {}
    for value in values:
        tags[clean_tag(value)] = None
        if len(tags) > MAX_TAGS:
            raise TagError(f"At most {MAX_TAGS} tags per request ({RULE}).")
    return tuple(tags)


def parse_tag_header(value: str) -> tuple[str, ...]:
    """Return the tags of an `X-Tollgate-Tags: a,b` header (blank items ignored)."""
    return clean_tags(item for item in value.split(",") if item.strip())


def merge_tags(*sources: Iterable[str]) -> tuple[str, ...]:
    """Return clean tags of several sources (request first, then key, then group), capped at
    MAX_TAGS: defaults that do not fit are dropped, never the request's own."""
    merged: dict[str, None] = {}
    for source in sources:
        for tag in source:
            if len(merged) >= MAX_TAGS:
                return tuple(merged)
            merged[tag] = None
    return tuple(merged)


def stored_tags(*sources: object) -> tuple[str, ...]:
    """Return the default tags of stored lists (a key's, then its group's), merged. They were
    checked when written; one that is not a tag (written around the API) is left out."""
    tags: list[str] = []
    for source in sources:
        for value in source if isinstance(source, list | tuple) else ():
            try:
                tags.append(clean_tag(value))
            except TagError:
                continue
    return merge_tags(tags)
