"""What a key may call, said in one line of the keys table (`{{ key|key_models }}`): its own
names, its access groups, and its group's bound, so the list never reads "all" for a key an
access group restricts (the rule: accounts/model_access.py)."""

from __future__ import annotations

from django import template

from accounts.models import ApiKey

register = template.Library()


@register.filter
def key_models(key: ApiKey) -> str:
    """Return the key's own names and access groups ("all" with neither), then its group's
    bound if it has one."""
    own = [*key.allowed_models, *(f"group {g.name}" for g in key.access_groups.all())]
    said = ", ".join(own) if own else "all"
    bound = [g.name for g in key.group.access_groups.all()]
    return f"{said}; within {', '.join(bound)}" if bound else said
