"""The live provider config held in memory: profiles, their adapters, models and prices.

Built from the database off the request path and swapped whole, so a request always sees
one consistent snapshot. Reloaded when the bus says profiles changed, and periodically.

Names a client may ask for, resolved in this order:
1. a canonical model name: every profile's offer of it (a fan-out);
2. an alias: another name of one canonical model, resolved like that name (the same
   fan-out). An alias that is also some profile's canonical model name never gets here:
   the canonical name wins. When profiles give one alias to models of different names, the
   model of the profile whose name sorts first wins (logged at load);
3. `"profile/name"`: that profile's model of that name, else its model with that alias.
Every offer carries its canonical name, so what is served and recorded is named by it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import aiohttp

from core.money import TokenPrices
from core.sealing import SealBroken, unseal
from gateway.adapters.base import Provider, VendorOptions
from gateway.adapters.client import VendorClient
from gateway.adapters.registry import build_adapter
from gateway.platform_keys import PlatformCredential, PlatformPool
from gateway.types import Usage
from gateway.web.adapters import WEB_ADAPTERS, WebAdapter
from gateway.web.types import PAGE, QUERY, RENDERED_PAGE
from providers.catalog import (
    KeySource,
    enabled_key_rows,
    enabled_profiles,
    model_aliases,
    offers_by_model,
    own_key,
    platform_keys,
)
from providers.models import (
    TEAM_KEY_ELIGIBLE_KINDS,
    WEB_KINDS,
    ModelKind,
    ProviderModel,
    ProviderProfile,
)
from providers.services import key_from_env

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
    # Same-shape routes forward request fields Tollgate does not know only when this is on.
    passthrough: bool = False
    # The profile's platform keys when it has keys of its own (gateway/platform_keys.py);
    # None: its one key, `platform_key`, serves every platform call.
    key_pool: PlatformPool | None = field(default=None, repr=False, compare=False)

    @property
    def team_key_eligible(self) -> bool:
        return self.kind in TEAM_KEY_ELIGIBLE_KINDS


@dataclass(frozen=True, slots=True)
class WebProfile:
    """A profile that serves web acquisition: its adapter, key and unit prices."""

    name: str
    kind: str
    platform_key: str | None = field(repr=False)
    allows_platform: bool
    timeout_s: float
    prices: dict[str, int]  # unit -> micro-USD, for the units it sells
    respect_robots: bool
    adapter: WebAdapter = field(repr=False, compare=False)
    key_pool: None = None  # web profiles have one platform key each

    @property
    def team_key_eligible(self) -> bool:
        return self.kind in TEAM_KEY_ELIGIBLE_KINDS

    def unit_for(self, action: str) -> str | None:
        """Return the unit this profile bills for an action, or None if it does not serve it."""
        unit = self.adapter.units.get(action)
        return unit if unit in self.prices else None


@dataclass(frozen=True, slots=True)
class CacheTerms:
    """The operator's response-cache terms for one model (providers/response_cache.py)."""

    cacheable: bool
    max_ttl_s: int
    hit_price_pct: int


NOT_CACHEABLE = CacheTerms(False, 0, 0)


@dataclass(frozen=True, slots=True)
class ModelOffer:
    """One provider's offer of one model: where it goes upstream and what it costs."""

    profile: Profile
    name: str
    upstream: str
    prices: TokenPrices
    max_output_tokens: int
    aliases: tuple[str, ...] = ()  # other names clients may use for this offer's model
    kind: str = ModelKind.CHAT  # which requests it answers: chat, embeddings or moderations
    cache: CacheTerms = NOT_CACHEABLE  # the operator's response-cache terms for this model

    def cost_micro(self, usage: Usage) -> int:
        """Return what `usage` costs at this offer's token prices (DESIGN's one rounding)."""
        return self.prices.cost_micro(
            tokens_in=usage.input_tokens,
            tokens_out=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )


@dataclass(frozen=True)
class Catalog:
    profiles: dict[str, Profile]
    offers_by_model: dict[str, tuple[ModelOffer, ...]]
    web: dict[str, WebProfile] = field(default_factory=dict)  # by name, sorted
    # Derived from the offers' aliases when built (see the module docstring).
    model_by_alias: dict[str, str] = field(init=False, repr=False, compare=False)
    _pinned: dict[tuple[str, str], ModelOffer] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_by_alias", _alias_index(self.offers_by_model))
        object.__setattr__(self, "_pinned", _pin_index(self.offers_by_model))

    def resolve(self, model: str) -> tuple[ModelOffer, ...]:
        """Return every offer of `model` (a canonical name, an alias, or "profile/name")."""
        offers = self.offers_by_model.get(model) or self.offers_by_model.get(
            self.model_by_alias.get(model, "")
        )
        if offers:
            return offers
        profile_name, sep, model_name = model.partition("/")
        if sep:
            offer = self._pinned.get((profile_name, model_name))
            return (offer,) if offer is not None else ()
        return ()

    def model_names(self) -> list[str]:
        """Return the canonical model names, sorted."""
        return sorted(self.offers_by_model)

    def kind_of(self, model: str) -> str:
        """Return a canonical model's kind: one per name (load_catalog keeps it so)."""
        return self.offers_by_model[model][0].kind

    def aliases(self) -> dict[str, str]:
        """Return each alias a client may use and the canonical model it names, sorted."""
        return dict(sorted(self.model_by_alias.items()))


def _by_profile(offers_by_model: dict[str, tuple[ModelOffer, ...]]) -> list[ModelOffer]:
    every = [offer for offers in offers_by_model.values() for offer in offers]
    return sorted(every, key=lambda o: (o.profile.name, o.name))


def _alias_index(offers_by_model: dict[str, tuple[ModelOffer, ...]]) -> dict[str, str]:
    index: dict[str, str] = {}
    for offer in _by_profile(offers_by_model):
        for alias in offer.aliases:
            if alias in offers_by_model:
                continue  # a canonical name wins over an alias
            named = index.setdefault(alias, offer.name)
            if named != offer.name:
                log.warning(
                    "alias %s of %s/%s already names model %s: ignored",
                    alias,
                    offer.profile.name,
                    offer.name,
                    named,
                )
    return index


def _pin_index(
    offers_by_model: dict[str, tuple[ModelOffer, ...]],
) -> dict[tuple[str, str], ModelOffer]:
    every = _by_profile(offers_by_model)
    pins = {(o.profile.name, o.name): o for o in every}
    for offer in every:
        for alias in offer.aliases:
            pins.setdefault((offer.profile.name, alias), offer)  # a name wins over an alias
    return pins


EMPTY = Catalog(profiles={}, offers_by_model={})


def _opened(key: KeySource, *, profile: str) -> str | None:
    """Return a platform credential's secret: from the environment, or unsealed (None if
    the variable is unset or the seal does not open)."""
    if key.env:
        return key_from_env(key.env) or None
    if key.sealed:
        try:
            # bytes(): a memoryview from some database drivers
            return unseal(bytes(key.sealed), version=key.seal_version, bound_to=key.binding)
        except SealBroken:
            what = f"platform key {key.label}" if key.key_id else "the platform key"
            log.error("%s of profile %s does not open; it serves nothing", what, profile)
    return None


def _platform_key(row: ProviderProfile) -> str | None:
    own = own_key(row)
    return _opened(own, profile=row.name) if own is not None else None


def _key_pool(row: ProviderProfile) -> PlatformPool | None:
    """Return the profile's pool of platform keys: those of providers.catalog.platform_keys
    that open; None when it has no enabled rows (its own key serves alone)."""
    if not enabled_key_rows(row):
        return None
    keys = []
    for key in platform_keys(row):
        secret = _opened(key, profile=row.name)
        if secret is None:
            continue
        keys.append(
            PlatformCredential(
                key_id=key.key_id,
                label=key.label,
                secret=secret,
                weight=key.weight,
                rpm=key.rpm,
                tpm=key.tpm,
            )
        )
    return PlatformPool(profile=row.name, strategy=row.key_strategy, keys=tuple(keys))


def load_catalog(session: aiohttp.ClientSession, vendors: VendorClient) -> Catalog:
    """Read enabled profiles and models (sync ORM: call from a thread)."""
    profiles: dict[str, Profile] = {}
    served: list[tuple[Profile, ProviderProfile]] = []
    web: dict[str, WebProfile] = {}
    for row in enabled_profiles():
        prices = _unit_prices(row)
        if row.kind in WEB_KINDS or (prices and row.kind in WEB_ADAPTERS):
            web[row.name] = WebProfile(
                name=row.name,
                kind=row.kind,
                platform_key=_platform_key(row),
                allows_platform=row.allows_platform,
                timeout_s=float(row.timeout_s),
                prices=prices,
                respect_robots=row.respect_robots,
                adapter=WEB_ADAPTERS[row.kind](base_url=row.base_url, session=session),
            )
            if row.kind in WEB_KINDS:
                continue
        adapter = build_adapter(
            row.kind,
            base_url=row.base_url,
            client=vendors,
            options=VendorOptions(
                api_version=row.api_version, region=row.region, project=row.project
            ),
        )
        if adapter is None:
            log.warning("profile %s has kind %s, which Tollgate cannot serve", row.name, row.kind)
            continue
        pool = _key_pool(row)
        profile = Profile(
            name=row.name,
            kind=row.kind,
            base_url=row.base_url,
            # With a pool: any of its keys (platform serving is on while one is usable).
            platform_key=pool.keys[0].secret if pool and pool.keys else _platform_key(row),
            key_pool=pool,
            allows_platform=row.allows_platform,
            timeout_s=float(row.timeout_s),
            idle_timeout_s=float(row.stream_idle_timeout_s),
            adapter=adapter,
            passthrough=row.passthrough,
        )
        profiles[row.name] = profile
        served.append((profile, row))
    offers, ignored = offers_by_model(served, _offer)
    for clash in ignored:
        log.warning(
            "model %s of profile %s is a %s model, but %s already offers it as %s: ignored",
            clash.model,
            clash.profile,
            clash.kind,
            clash.offered_by,
            clash.offered_as,
        )
    return Catalog(
        profiles=profiles,
        offers_by_model={name: tuple(r) for name, r in offers.items()},
        web=web,
    )


def _offer(profile: Profile, m: ProviderModel) -> ModelOffer:
    return ModelOffer(
        profile=profile,
        name=m.name,
        upstream=m.upstream or m.name,
        prices=m.token_prices(),
        max_output_tokens=m.max_output_tokens,
        aliases=model_aliases(m),
        kind=m.kind,
        cache=CacheTerms(m.cacheable, m.cache_max_ttl_s, m.cache_hit_price_pct),
    )


def _unit_prices(row: ProviderProfile) -> dict[str, int]:
    columns = {
        PAGE: row.page_micro,
        RENDERED_PAGE: row.rendered_page_micro,
        QUERY: row.query_micro,
    }
    return {unit: price for unit, price in columns.items() if price is not None}
