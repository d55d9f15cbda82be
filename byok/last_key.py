"""What removing a pool's last team key does: the pool stays, with its fallback flag, and the
group's next request for the provider's models answers as with no pool, by that flag
(byok.payers, the rule the gateway follows): served on the platform's keys when fallback is on
and the platform serves the provider, refused with LM-3021 otherwise.

Asked before the last key goes (the dashboard's confirmation), said after (its message).
"""

from __future__ import annotations

from dataclasses import dataclass

from byok.models import KeyPool, TeamKey
from byok.payer_map import NAMED, ProfileView, served_offers
from byok.payers import PLATFORM, link_payers, platform_serves, refusal_message
from byok.selectors import listing
from core.errors import TeamKeysExhausted
from providers.catalog import platform_keys
from providers.models import ProviderProfile


@dataclass(frozen=True)
class AfterLastKey:
    """The group's next request for a provider's models once its pool has no key."""

    group: str
    provider: str
    models: tuple[str, ...]  # what the provider serves (none for a web profile)
    fallback: bool
    platform: bool  # served on the platform's keys, paid from the wallet; else refused
    refusal: str  # the LM-3021 message the request is answered, when refused

    @property
    def requests(self) -> str:
        """Name the requests concerned: the provider's models, or the provider's."""
        served = f" ({listing(self.models)})" if self.models else ""
        return f"{self.group}'s requests for {self.provider}{served}"

    @property
    def sentence(self) -> str:
        """Say what the next such request does, in the words the dashboard shows."""
        if self.platform:
            return (
                f"The next of {self.requests} is served on the platform's keys and paid from "
                "your wallet: platform fallback is on."
            )
        return (
            f"The next of {self.requests} is refused with {TeamKeysExhausted.code} "
            f'("{self.refusal}"); no platform money is spent.'
        )


def is_last_key(team_key: TeamKey) -> bool:
    """Say whether the key is the only one left in its pool."""
    return not TeamKey.objects.filter(pool_id=team_key.pool_id).exclude(pk=team_key.pk).exists()


def _profile_view(provider: str) -> tuple[ProfileView | None, tuple[str, ...]]:
    """The provider's profile as the payer rule reads it, and the models it serves."""
    models = []
    view = None
    for name, offers in served_offers().items():
        for offer in offers:
            if offer.profile.name == provider:
                view = offer.profile
                models.append(name)
    if view is None:  # a web profile, or one serving no model yet: read its row
        row = ProviderProfile.objects.filter(name=provider, enabled=True).first()
        if row is not None:
            has_key = bool(platform_keys(row))  # the catalog's rule, as payer_map reads it
            view = ProfileView(row.name, row.kind, row.allows_platform, NAMED if has_key else None)
    return view, tuple(sorted(models))


def after_last_key(pool: KeyPool) -> AfterLastKey:
    """Return what the group's next request for the pool's provider meets with no key left."""
    profile, models = _profile_view(pool.provider)
    platform_ok = profile is not None and platform_serves(profile)
    emptied = _Emptied(fallback=pool.fallback)
    payers = link_payers(pool=emptied, platform_ok=platform_ok, locked=False)
    return AfterLastKey(
        group=pool.group.name,
        provider=pool.provider,
        models=models,
        fallback=pool.fallback,
        platform=payers.served_by == (PLATFORM,),
        refusal=(
            ""
            if payers.served_by
            else refusal_message(pool.provider, locked=False, fallback_off=not pool.fallback)
        ),
    )


@dataclass(frozen=True)
class _Emptied:
    """The pool as the payer rule reads it once its last key is gone."""

    fallback: bool
    keys: tuple[int, ...] = ()
