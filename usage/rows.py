"""Usage rows made storable: what a client can influence is bounded and cleaned.

A client chooses its model name (and more, over time); that text lands in the usage row. A
row the database refuses (over a column's length, or with a NUL byte, which PostgreSQL text
cannot hold) would sit in the journal failing every batch it is part of, so every row is
cleaned before it is journaled (gateway/recording.py) and again before it is stored (the writer).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache

from django.db import models

from core.usage_record import UsageRecord
from usage.models import UsageLog
from usage.trail import TEXT_LENGTHS

# C0 and C1 control characters (NUL included) and lone surrogates: never in a stored name,
# and a surrogate would not even encode to the UTF-8 the journal and the database take.
_UNWANTED = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@cache
def _max_lengths(model: type[models.Model]) -> dict[str, int]:
    return {
        field.attname: field.max_length
        for field in model._meta.concrete_fields
        if isinstance(field, models.CharField) and field.max_length
    }


def clean_text(value: str, max_length: int) -> str:
    """Return `value` without control characters, cut to `max_length` characters."""
    if not value.isprintable():  # fast path: printable text has no control characters
        value = _UNWANTED.sub("", value)
    return value[:max_length]


def _cleaned(value, limits: dict[str, int]):
    """Return a frozen record with its text cut to its columns (itself when nothing changes)."""
    changes = {}
    for name, max_length in limits.items():
        text = getattr(value, name, None)
        # Most text is already clean: told so without a call or a copy (twice per request).
        if isinstance(text, str) and (len(text) > max_length or not text.isprintable()):
            clean = clean_text(text, max_length)
            if clean != text:
                changes[name] = clean
    return replace(value, **changes) if changes else value


def clean_record(record: UsageRecord) -> UsageRecord:
    """Return a usage record whose text fits its columns: in the record and in each attempt.

    Lengths come from the UsageLog fields, so a migration that changes one changes what is
    kept, and an attempt's from usage.trail.TEXT_LENGTHS. Numbers are the gateway's own; a
    record still wrong goes to the dead-letter table when it is stored.
    """
    attempts = tuple(_cleaned(attempt, TEXT_LENGTHS) for attempt in record.attempts)
    cleaned = _cleaned(record, _max_lengths(UsageLog))
    if any(a is not b for a, b in zip(attempts, record.attempts, strict=True)):
        cleaned = replace(cleaned, attempts=attempts)
    return cleaned
