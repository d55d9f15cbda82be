"""Reads of team keys, scoped to the caller's account, and which providers may take one."""

from __future__ import annotations

from django.db.models import QuerySet

from byok.models import KeyPool, TeamKey
from providers.models import TEAM_KEY_ELIGIBLE_KINDS, ProviderProfile


def pools_of_group(*, group_id: int) -> QuerySet[KeyPool]:
    return KeyPool.objects.filter(group_id=group_id).prefetch_related("keys").order_by("provider")


def team_keys_of_user(*, user) -> QuerySet[TeamKey]:
    return TeamKey.objects.filter(pool__group__account__memberships__user=user).select_related(
        "pool__group__account"
    )


def eligible_providers() -> list[str]:
    """Return the sorted names of live (enabled) profiles of a kind a team key may use."""
    return sorted(
        ProviderProfile.objects.filter(enabled=True, kind__in=TEAM_KEY_ELIGIBLE_KINDS).values_list(
            "name", flat=True
        )
    )


def eligible_providers_hint(names: list[str] | None = None) -> str:
    """Say, in a sentence, which providers team keys can be added for (`names`: the list
    `eligible_providers` returned, when the caller already has it)."""
    names = eligible_providers() if names is None else names
    if not names:
        return "No provider in the live config takes team keys."
    return f"Team keys can be added for: {', '.join(names)}."
