"""The live provider config held in memory: profiles, their adapters, models and prices.

Built from the database off the request path and swapped whole, so a request always sees
one consistent snapshot. Reloaded when the bus says profiles changed, and periodically.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import aiohttp

from core.sealing import SealBroken, unseal
from gateway.adapters.base import Provider
from gateway.adapters.registry import build_adapter
from providers.models import TEAM_KEY_ELIGIBLE_KINDS, ProviderProfile

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    kind: str
    base_url: str
    platform_key: str | None = field(repr=False)
    allows_platform: bool
    timeout_s: float
    idle_timeout_s: float
    adapter: Provider = field(repr=False, compare=False)
    passthrough: bool = False  # TEMP until the catalog branch lands

    @property
    def team_key_eligible(self) -> bool:
        return self.kind in TEAM_KEY_ELIGIBLE_KINDS


@dataclass(frozen=True, slots=True)
class ModelOffer:
    """One provider's offer of one model: where it goes upstream and what it costs."""

    profile: Profile
    name: str
    upstream: str
    input_micro_per_mtok: int
    output_micro_per_mtok: int
    max_output_tokens: int
    cached_input_micro_per_mtok: int = 0  # TEMP until the catalog branch lands
    cache_write_micro_per_mtok: int = 0


@dataclass(frozen=True)
class Catalog:
    profiles: dict[str, Profile]
    offers_by_model: dict[str, tuple[ModelOffer, ...]]

    def resolve(self, model: str) -> tuple[ModelOffer, ...]:
        """Return every offer of `model`; "profile/model" pins one profile."""
        offers = self.offers_by_model.get(model)
        if offers:
            return offers
        profile_name, sep, model_name = model.partition("/")
        if sep:
            return tuple(
                r
                for r in self.offers_by_model.get(model_name, ())
                if r.profile.name == profile_name
            )
        return ()

    def model_names(self) -> list[str]:
        return sorted(self.offers_by_model)


EMPTY = Catalog(profiles={}, offers_by_model={})


def _platform_key(profile: ProviderProfile) -> str | None:
    if profile.api_key_env:
        return os.environ.get(profile.api_key_env) or None
    if profile.api_key_sealed:
        try:
            return unseal(
                profile.api_key_sealed,
                version=profile.api_key_seal_version,
                bound_to=profile.seal_binding,
            )
        except SealBroken:
            log.error(
                "platform key of profile %s does not open; platform serving off", profile.name
            )
    return None


def load_catalog(session: aiohttp.ClientSession) -> Catalog:
    """Read enabled profiles and models (sync ORM: call from a thread)."""
    profiles: dict[str, Profile] = {}
    offers: dict[str, list[ModelOffer]] = {}
    for row in ProviderProfile.objects.filter(enabled=True).prefetch_related("models"):
        adapter = build_adapter(row.kind, base_url=row.base_url, session=session)
        if adapter is None:
            log.warning("profile %s has kind %s, which Tollgate cannot serve", row.name, row.kind)
            continue
        profile = Profile(
            name=row.name,
            kind=row.kind,
            base_url=row.base_url,
            platform_key=_platform_key(row),
            allows_platform=row.allows_platform,
            timeout_s=float(row.timeout_s),
            idle_timeout_s=float(row.stream_idle_timeout_s),
            adapter=adapter,
        )
        profiles[row.name] = profile
        for m in row.models.all():
            offers.setdefault(m.name, []).append(
                ModelOffer(
                    profile=profile,
                    name=m.name,
                    upstream=m.upstream or m.name,
                    input_micro_per_mtok=m.input_micro_per_mtok,
                    output_micro_per_mtok=m.output_micro_per_mtok,
                    max_output_tokens=m.max_output_tokens,
                )
            )
    return Catalog(
        profiles=profiles,
        offers_by_model={name: tuple(r) for name, r in offers.items()},
    )
