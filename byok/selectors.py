"""Reads of team keys, scoped to the caller's account."""

from __future__ import annotations

from django.db.models import QuerySet

from byok.models import KeyPool, TeamKey


def pools_of_group(*, group_id: int) -> QuerySet[KeyPool]:
    return KeyPool.objects.filter(group_id=group_id).prefetch_related("keys").order_by("provider")


def team_keys_of_user(*, user) -> QuerySet[TeamKey]:
    return TeamKey.objects.filter(pool__group__account__memberships__user=user).select_related(
        "pool__group__account"
    )


def eligible_providers() -> list[str]:
    """Return the names of the enabled providers a team key can be added for, sorted."""
    from providers.models import TEAM_KEY_ELIGIBLE_KINDS, ProviderProfile

    return sorted(
        ProviderProfile.objects.filter(enabled=True, kind__in=TEAM_KEY_ELIGIBLE_KINDS).values_list(
            "name", flat=True
        )
    )
