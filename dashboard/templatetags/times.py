"""Times on the dashboard's pages: one way to show a moment (`{{ value|when }}`)."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def when(value: datetime | None, fmt: str = "Y-m-d H:i:s") -> SafeString | str:
    """`<time>` with the moment readable in the page's time zone (the account's) and its exact
    ISO value, microseconds and offset, in `datetime` and on hover."""
    if value is None:
        return "—"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    iso = local.isoformat()
    shown = date_format(local, fmt)
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, iso, shown)
