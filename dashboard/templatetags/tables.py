"""Template filters for tables: looking a row's id up in a dict the view built."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def get_item(mapping: dict, key):
    """`{{ names|get_item:row.group_id }}`: the value under `key`, or None."""
    return mapping.get(key) if mapping else None
