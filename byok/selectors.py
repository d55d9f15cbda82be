"""Reads of team keys, scoped to the caller's account, and which providers may take one."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from django.db.models import QuerySet

from byok.models import KeyPool, TeamKey
from providers.models import (
    TEAM_KEY_ELIGIBLE_KINDS,
    WEB_KINDS,
    ProviderKind,
    ProviderModel,
    ProviderProfile,
)

NAMES_SHOWN = 6  # a profile's models named in a one-line label; the rest counted
RECENT_DAYS = 30  # a key saved where none of the account's models of these days is served warns


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


def listing(names: Iterable[str], *, shown: int = NAMES_SHOWN) -> str:
    """Name up to `shown` of `names` (sorted), the rest counted: "a, b and 3 more"."""
    names = sorted(names)
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


@dataclass(frozen=True)
class TeamKeyProfile:
    """A live profile a team key may be added for, and what a key there serves."""

    name: str
    models: tuple[str, ...]  # the model names clients ask for, sorted (every kind)
    aliases: frozenset[str]  # their other names
    web: str = ""  # a web profile's kind, said ("Search vendor"): it serves no model

    @property
    def label(self) -> str:
        """The profile as the provider list offers it: its name and what it serves."""
        if self.web:
            return f"{self.name} — web: {self.web}, no models"
        return f"{self.name} — {listing(self.models) or 'no models yet'}"

    def serves(self, model: str) -> bool:
        return model in self.models or model in self.aliases


def team_key_profiles() -> list[TeamKeyProfile]:
    """Return the live (enabled) profiles a team key may be added for, model profiles first,
    each by name, with what it serves."""
    profiles = ProviderProfile.objects.filter(enabled=True, kind__in=TEAM_KEY_ELIGIBLE_KINDS)
    served: dict[int, list[tuple[str, list]]] = {}
    for profile_id, name, aliases in ProviderModel.objects.filter(profile__in=profiles).values_list(
        "profile_id", "name", "aliases"
    ):
        served.setdefault(profile_id, []).append((name, aliases or []))
    found = [
        TeamKeyProfile(
            name=profile.name,
            models=tuple(sorted(name for name, _ in served.get(profile.pk, []))),
            aliases=frozenset(a for _, names in served.get(profile.pk, []) for a in names),
            web=ProviderKind(profile.kind).label if profile.kind in WEB_KINDS else "",
        )
        for profile in profiles
    ]
    return sorted(found, key=lambda p: (bool(p.web), p.name))


def known_models() -> set[str]:
    """Every name a client may ask for a model by (enabled profiles): names and aliases."""
    known: set[str] = set()
    for name, aliases in ProviderModel.objects.filter(profile__enabled=True).values_list(
        "name", "aliases"
    ):
        known.add(name)
        known.update(aliases or [])
    return known


def unserved_recent_models(profile: TeamKeyProfile, recent: Collection[str]) -> str | None:
    """Say so when a model profile serves none of `recent` (the account's models of late,
    misspelt names left out), a key there then serving none of those requests; else None."""
    recent = set(recent) & known_models()
    if profile.web or not recent or any(profile.serves(m) for m in recent):
        return None
    serves = listing(profile.models) or "no model yet"
    return (
        f"{profile.name} serves {serves}; none of your account's models of the last "
        f"{RECENT_DAYS} days ({listing(recent)}) is among them, so this key serves none of "
        "those requests. "
        "Add the key where those models are served, or ask for one of this provider's models."
    )
