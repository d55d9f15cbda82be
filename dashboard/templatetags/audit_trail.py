"""Template filters of the audit trail page."""

from __future__ import annotations

from django import template

from audit.summary import summary

register = template.Library()


@register.filter
def change_words(entry) -> str:
    """An entry's change in words, amounts in dollars (audit/summary.py)."""
    return summary(entry) or "—"
