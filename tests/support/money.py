"""Amounts as a person types them into the admin or the dashboard."""

from __future__ import annotations


def typed_dollars(micro: int) -> str:
    """Micro-USD as typed dollars with every digit: 150_000 -> "0.150000"."""
    return f"{micro // 1_000_000}.{micro % 1_000_000:06d}"
