"""The routing rules read off the provider config: the gateway's catalog and plan route by
them (gateway/catalog.py, gateway/plan.py), and a key's payer map (byok/payer_map.py) reads
them to say who pays, so the two never disagree. Here because both apps may import providers
and byok may not import the gateway.

- Profiles are read enabled only, in name order (the order the rules below depend on).
- A model name answers one kind of request (chat, embeddings or moderations): the kind of
  the first profile, by name, that offers it; a later profile's offer of it as another kind
  is ignored.
- A profile has a platform key when it names or seals one of its own, or has an enabled,
  active platform key row (a failing one waits for an operator). The gateway counts one only
  if it opens (its environment holds the variable, the seal opens); the payer map, in another
  service's environment, counts what is there.
- A canonical model served by several profiles is tried cheapest per token (input plus output
  price) first, ties by profile name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from django.db.models import QuerySet

from core.money import TokenPrices
from providers.models import PlatformKey, ProviderModel, ProviderProfile
from providers.services import OWN_KEY_LABEL

# The reader's profile (gateway.catalog.Profile, byok.payer_map.ProfileView) and its offer.
ProfileT = TypeVar("ProfileT")
OfferT = TypeVar("OfferT")


def enabled_profiles() -> QuerySet[ProviderProfile]:
    """Return the enabled profiles in name order, their models and platform keys fetched."""
    rows = ProviderProfile.objects.filter(enabled=True).order_by("name")
    return rows.prefetch_related("models", "platform_keys")


# ---------------------------------------------------------------- offers of a model name


@dataclass(frozen=True, slots=True)
class Ignored:
    """A profile's model ignored because an earlier profile offers its name as another kind."""

    model: str
    profile: str
    kind: str
    offered_by: str  # the first profile to offer the name
    offered_as: str  # the kind it answers


def offers_by_model(
    served: Iterable[tuple[ProfileT, ProviderProfile]],
    offer: Callable[[ProfileT, ProviderModel], OfferT],
) -> tuple[dict[str, list[OfferT]], list[Ignored]]:
    """Return each model name's offers (`offer` of a profile and one of its models), the
    profiles taken in the order given (enabled_profiles': by name), and the models ignored
    because an earlier profile offers the name as another kind."""
    offers: dict[str, list[OfferT]] = {}
    first: dict[str, tuple[str, str]] = {}  # model name -> (profile, kind) of its first offer
    ignored: list[Ignored] = []
    for profile, row in served:
        for m in row.models.all():
            offered_by, offered_as = first.setdefault(m.name, (row.name, m.kind))
            if offered_as != m.kind:
                ignored.append(Ignored(m.name, row.name, m.kind, offered_by, offered_as))
                continue
            offers.setdefault(m.name, []).append(offer(profile, m))
    return offers, ignored


def model_aliases(model: ProviderModel) -> tuple[str, ...]:
    """Return the other names a model row gives its model (non-empty strings only)."""
    return tuple(a for a in model.aliases or () if isinstance(a, str) and a)


# ---------------------------------------------------------------- platform keys


@dataclass(frozen=True, slots=True)
class KeySource:
    """One platform credential of a profile as stored: where its secret is (an environment
    variable named, else sealed) and the vendor's limits for it."""

    key_id: int  # 0: the profile's own key
    label: str
    env: str = ""
    sealed: bytes | memoryview | None = None
    seal_version: str = ""
    binding: str = ""
    weight: int = 1
    rpm: int = 0  # 0: no limit
    tpm: int = 0


def own_key(row: ProviderProfile) -> KeySource | None:
    """Return the profile's own platform credential, when it names or seals one."""
    if not (row.api_key_env or row.api_key_sealed):
        return None
    return KeySource(
        key_id=0,
        label=OWN_KEY_LABEL,
        env=row.api_key_env,
        # A variable named wins over a sealed key.
        sealed=None if row.api_key_env else row.api_key_sealed,
        seal_version=row.api_key_seal_version,
        binding=row.seal_binding,
    )


def enabled_key_rows(row: ProviderProfile) -> list[PlatformKey]:
    """Return the profile's enabled platform key rows, failing ones too."""
    return [k for k in row.platform_keys.all() if k.enabled]


def platform_keys(row: ProviderProfile) -> tuple[KeySource, ...]:
    """Return the profile's platform credentials that may serve, in the order its pool holds
    them: its own first, then its enabled, active rows that name or seal one."""
    own = own_key(row)
    rows = tuple(
        KeySource(
            key_id=k.pk,
            label=k.label,
            env=k.api_key_env,
            sealed=None if k.api_key_env else k.sealed,
            seal_version=k.seal_version,
            binding=k.seal_binding,
            weight=k.weight,
            rpm=k.rpm or 0,
            tpm=k.tpm or 0,
        )
        for k in enabled_key_rows(row)
        if k.status == PlatformKey.Status.ACTIVE and (k.api_key_env or k.sealed)
    )
    return (own, *rows) if own is not None else rows


# ---------------------------------------------------------------- the order offers are tried


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class PricedOffer(Protocol):
    """What the ranking reads of an offer (gateway.catalog.ModelOffer, byok.payer_map.Offer)."""

    @property
    def profile(self) -> _Named: ...
    @property
    def prices(self) -> TokenPrices: ...


RankedT = TypeVar("RankedT", bound=PricedOffer)


def price_rank(offer: PricedOffer) -> tuple[int, str]:
    """Rank a canonical model's offers: cheapest per token first, then by profile name."""
    prices = offer.prices
    return (prices.input_micro_per_mtok + prices.output_micro_per_mtok, offer.profile.name)


def cheapest_first(offers: Sequence[RankedT]) -> list[RankedT]:
    """Return a canonical model's offers in the order they are tried."""
    return sorted(offers, key=price_rank) if len(offers) > 1 else list(offers)
