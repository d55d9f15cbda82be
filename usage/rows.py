"""Usage rows made storable: what a client can influence is bounded and cleaned.

A client chooses its model name (and more, over time); that text lands in the usage row. A
row the database refuses (over a column's length, or with a NUL byte, which PostgreSQL text
cannot hold) would sit in the journal failing every batch it is part of, so every row is
cleaned before it is journaled (gateway/recording.py) and again before it is stored (the writer).
"""

from __future__ import annotations

import re
from functools import cache

from django.db import models

from usage.models import UsageAttempt, UsageLog

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


def _clean(values: dict, limits: dict[str, int]) -> dict:
    return {
        name: clean_text(value, limits[name])
        if name in limits and isinstance(value, str)
        else value
        for name, value in values.items()
    }


def clean_row(row: dict) -> dict:
    """Return a usage row whose text fits its columns: in the row and in each attempt.

    Lengths come from the UsageLog / UsageAttempt fields, so a migration that changes one
    changes what is kept. Numbers and anything not a dict are left alone: those are the
    gateway's own, and a row still wrong goes to the dead-letter table when it is stored.
    """
    cleaned = _clean(row, _max_lengths(UsageLog))
    attempts = cleaned.get("attempts")
    if isinstance(attempts, list):
        limits = _max_lengths(UsageAttempt)
        cleaned["attempts"] = [
            _clean(attempt, limits) if isinstance(attempt, dict) else attempt
            for attempt in attempts
        ]
    return cleaned
