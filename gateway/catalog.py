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

from core.sealing import SealBroken, unseal
from gateway.adapters.base import Provider, VendorOptions
from gateway.adapters.registry import build_adapter
from gateway.platform_keys import KeyPool, PlatformCredential
from gateway.web.adapters import WEB_ADAPTERS, WebAdapter
from gateway.web.types import PAGE, QUERY, RENDERED_PAGE
from providers.models import (
    TEAM_KEY_ELIGIBLE_KINDS,
    WEB_KINDS,
    ModelKind,
    PlatformKey,
    ProviderProfile,
)
from providers.services import OWN_KEY_LABEL, key_from_env

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
    key_pool: KeyPool | None = field(default=None, repr=False, compare=False)

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
class ModelOffer:
    """One provider's offer of one model: where it goes upstream and what it costs."""

    profile: Profile
    name: str
    upstream: str
    input_micro_per_mtok: int
    output_micro_per_mtok: int
    max_output_tokens: int
    # Cache reads and writes per Mtok; None when built means the input price (never None after).
    cached_input_micro_per_mtok: int = None  # type: ignore[assignment]
    cache_write_micro_per_mtok: int = None  # type: ignore[assignment]
    aliases: tuple[str, ...] = ()  # other names clients may use for this offer's model
    kind: str = ModelKind.CHAT  # which requests it answers: chat or embeddings

    def __post_init__(self) -> None:
        if self.cached_input_micro_per_mtok is None:
            object.__setattr__(self, "cached_input_micro_per_mtok", self.input_micro_per_mtok)
        if self.cache_write_micro_per_mtok is None:
            object.__setattr__(self, "cache_write_micro_per_mtok", self.input_micro_per_mtok)


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


def _credential(
    *, env: str, sealed: bytes | memoryview | None, version: str, binding: str, what: str
) -> str | None:
    """Return a platform credential: from the environment, or unsealed (None if neither)."""
    if env:
        return key_from_env(env) or None
    if sealed:
        try:
            # bytes(): a memoryview from some database drivers
            return unseal(bytes(sealed), version=version, bound_to=binding)
        except SealBroken:
            log.error("%s does not open; it serves nothing", what)
    return None


def _platform_key(profile: ProviderProfile) -> str | None:
    return _credential(
        env=profile.api_key_env,
        sealed=profile.api_key_sealed,
        version=profile.api_key_seal_version,
        binding=profile.seal_binding,
        what=f"the platform key of profile {profile.name}",
    )


def _unsealed(key: PlatformKey) -> str | None:
    return _credential(
        env=key.api_key_env,
        sealed=key.sealed,
        version=key.seal_version,
        binding=key.seal_binding,
        what=f"platform key {key.label} of profile {key.profile_id}",
    )


def _key_pool(row: ProviderProfile) -> KeyPool | None:
    """Return the profile's pool of platform keys: its own key first (labelled `profile`),
    then its usable PlatformKey rows; None when it has no rows (its own key serves alone)."""
    rows = [k for k in row.platform_keys.all() if k.enabled]
    if not rows:
        return None
    keys = []
    own = _platform_key(row)
    if own is not None:
        keys.append(PlatformCredential(key_id=0, label=OWN_KEY_LABEL, secret=own))
    for key in rows:
        secret = _unsealed(key)
        if secret is None or key.status != PlatformKey.Status.ACTIVE:
            continue  # a failing key waits for an operator (gateway/platform_keys.py)
        keys.append(
            PlatformCredential(
                key_id=key.pk,
                label=key.label,
                secret=secret,
                weight=key.weight,
                rpm=key.rpm or 0,
                tpm=key.tpm or 0,
            )
        )
    return KeyPool(profile=row.name, strategy=row.key_strategy, keys=tuple(keys))


def load_catalog(session: aiohttp.ClientSession) -> Catalog:
    """Read enabled profiles and models (sync ORM: call from a thread)."""
    profiles: dict[str, Profile] = {}
    offers: dict[str, list[ModelOffer]] = {}
    web: dict[str, WebProfile] = {}
    profiles_by_name = ProviderProfile.objects.filter(enabled=True).order_by("name")
    for row in profiles_by_name.prefetch_related("models", "platform_keys"):
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
            session=session,
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
        for m in row.models.all():
            offered = offers.get(m.name)
            if offered and offered[0].kind != m.kind:
                # A name answers one kind of request: the first profile's (by name) wins.
                log.warning(
                    "model %s of profile %s is a %s model, but %s already offers it as %s: ignored",
                    m.name,
                    row.name,
                    m.kind,
                    offered[0].profile.name,
                    offered[0].kind,
                )
                continue
            offers.setdefault(m.name, []).append(
                ModelOffer(
                    profile=profile,
                    name=m.name,
                    upstream=m.upstream or m.name,
                    input_micro_per_mtok=m.input_micro_per_mtok,
                    output_micro_per_mtok=m.output_micro_per_mtok,
                    max_output_tokens=m.max_output_tokens,
                    # No cache price of its own: ModelOffer charges the input price.
                    cached_input_micro_per_mtok=m.cached_input_micro_per_mtok,  # type: ignore[arg-type]
                    cache_write_micro_per_mtok=m.cache_write_micro_per_mtok,  # type: ignore[arg-type]
                    aliases=tuple(a for a in m.aliases or () if isinstance(a, str) and a),
                    kind=m.kind,
                )
            )
    return Catalog(
        profiles=profiles,
        offers_by_model={name: tuple(r) for name, r in offers.items()},
        web=web,
    )


def _unit_prices(row: ProviderProfile) -> dict[str, int]:
    columns = {
        PAGE: row.page_micro,
        RENDERED_PAGE: row.rendered_page_micro,
        QUERY: row.query_micro,
    }
    return {unit: price for unit, price in columns.items() if price is not None}
