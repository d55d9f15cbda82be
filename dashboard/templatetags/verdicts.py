"""Template filters for guardrail verdicts on usage rows (dashboard/guardrail_selectors.py)."""

from __future__ import annotations

from django import template

from dashboard.guardrail_selectors import acted, acted_by

register = template.Library()


@register.filter
def guardrail_acted(verdicts: object) -> str:
    """`{{ log.guardrails|guardrail_acted }}`: "block", "redact" or ""."""
    return acted(verdicts)


@register.filter
def guardrails_that(verdicts: object, action: str) -> str:
    """`{{ log.guardrails|guardrails_that:"redact" }}`: the names of those that did it."""
    return ", ".join(acted_by(verdicts, action))
