"""The payer map against the attempt plan: for every state of a group's pools (none, emptied,
with keys; fallback on or off), platform serving and team serving on or off, the payers the
map lists for a model are the attempts gateway.plan.build_plan gives its request, in order,
and a model nobody pays for is refused with the message the chain answers."""

from __future__ import annotations

import itertools

import pytest

from byok.payer_map import Offer as MapOffer
from byok.payer_map import PoolCounts, ProfileView, model_payers
from byok.payers import refusal_message
from byok.pools import Pool, PoolKey
from core.money import TokenPrices
from gateway.attempts import TEAM
from gateway.catalog import ModelOffer
from gateway.plan import build_plan
from tests.unit.gateway.test_plan import GROUP, OFFERS, catalog, principal, request

PROVIDERS = ("deepinfra", "groq", "together")  # llama's, tried in this order (cheapest first)
STATES = ("none", "emptied-off", "emptied-on", "keys-off", "keys-on")


def gateway_pool(provider: str, state: str) -> Pool | None:
    if state == "none":
        return None
    keys = (PoolKey(1, "team-1", "sk-team-1"),) if state.startswith("keys") else ()
    return Pool(GROUP, provider, state.endswith("-on"), keys)


def map_pool(pool: Pool) -> PoolCounts:
    return PoolCounts(pool.fallback, tuple(k.key_id for k in pool.keys), len(pool.keys))


def map_offer(offer: ModelOffer) -> MapOffer:
    """The offer as byok.payer_map.served_offers reads it from the profile's rows."""
    prof = offer.profile
    return MapOffer(
        profile=ProfileView(
            prof.name, prof.kind, prof.allows_platform, "named" if prof.platform_key else None
        ),
        model=offer.name,
        kind=offer.kind,
        aliases=offer.aliases,
        prices=offer.prices,
    )


def plan_says(model: str, found: dict[str, Pool]):
    """Return the plan's attempts as the map names them, and the refusal a request meets."""
    plan = build_plan(request(model), principal(), catalog(), lambda _g, name: found.get(name))
    attempts = [
        ("team_key" if a.served_by == TEAM else "platform", link.profile.name)
        for link in plan.links
        for a in link.attempts
    ]
    last = plan.links[-1]
    refusal = refusal_message(
        last.profile.name, locked=last.locked, fallback_off=last.pool_exhausted_refusal
    )
    return attempts, None if attempts else refusal


@pytest.mark.parametrize("platform_on", [True, False])
@pytest.mark.parametrize("team_on", [True, False])
def test_the_map_lists_the_plans_attempts_for_every_pool_state(settings, platform_on, team_on):
    settings.GATEWAY_PTB_ENABLED = platform_on
    settings.GATEWAY_BYOK_ENABLED = team_on
    llama = [map_offer(o) for o in OFFERS if o.name == "llama"]

    for states in itertools.product(STATES, repeat=len(PROVIDERS)):
        found = {
            p: pool
            for p, s in zip(PROVIDERS, states, strict=True)
            if (pool := gateway_pool(p, s)) is not None
        }
        attempts, refusal = plan_says("llama", found)

        entry = model_payers(
            llama, group_id=GROUP, pools={p: map_pool(pool) for p, pool in found.items()}
        )

        assert [(a.payer, a.provider) for a in entry.attempts] == attempts, states
        assert entry.payer == (attempts[0][0] if attempts else "refused"), states
        assert (entry.code, entry.reason) == (("LM-3021", refusal) if refusal else ("", "")), states


def test_a_refused_chain_is_answered_the_last_links_words():
    llama = [map_offer(o) for o in OFFERS if o.name == "llama"]
    # deepinfra's pool emptied with fallback off locks the links after it.
    entry = model_payers(llama, group_id=GROUP, pools={"deepinfra": PoolCounts(False, (), 0)})

    assert (entry.payer, entry.code, entry.reason) == (
        "refused",
        "LM-3021",
        "Chain locked: no team key for together and platform fallback is off.",
    )


def test_the_price_is_the_first_platform_attempts_and_team_keys_are_the_first_pools():
    llama = [map_offer(o) for o in OFFERS if o.name == "llama"]
    entry = model_payers(
        llama,
        group_id=GROUP,
        pools={"deepinfra": PoolCounts(True, (4, 5), 1), "groq": PoolCounts(False, (6,), 1)},
    )

    assert [(a.payer, a.provider) for a in entry.attempts] == [
        ("team_key", "deepinfra"),
        ("platform", "deepinfra"),
        ("team_key", "groq"),
    ]
    assert (entry.then, entry.team_keys, entry.team_keys_usable) == ("platform", 2, 1)
    assert entry.price == TokenPrices(30_000, 100_000, 30_000, 30_000)


# ---------------------------------------------------------------- read from the database


def served(name: str, kind: str, model: str, model_kind: str = "chat", **fields):
    from providers.models import ProviderModel, ProviderProfile

    row = ProviderProfile.objects.create(name=name, kind=kind, **fields)
    ProviderModel.objects.create(
        profile=row, name=model, kind=model_kind, upstream=model, input_micro_per_mtok=1
    )
    return row


@pytest.mark.django_db
def test_the_map_reads_profiles_as_the_catalog_loads_them(monkeypatch):
    from accounts.models import ApiKey
    from byok.payer_map import payer_map
    from providers.models import PlatformKey
    from tests.support.tenants import make_tenant

    monkeypatch.delenv("PAYERS_TEST_KEY", raising=False)
    served("a-named", "openai", "named-model", api_key_env="PAYERS_TEST_KEY")
    served("b-keyless", "openai", "keyless-model")
    served("c-closed", "openai", "closed-model", allows_platform=False, api_key_env="X")
    pooled = served("d-pooled", "anthropic", "pooled-model")
    PlatformKey.objects.create(profile=pooled, label="k1", api_key_env="PAYERS_TEST_KEY")
    served("e-web", "direct_http", "web-model", page_micro=1)
    served("f-off", "openai", "off-model", enabled=False, api_key_env="X")
    # The same name as an embedding model on a later profile: the first profile's kind wins.
    served("g-clash", "openai", "named-model", model_kind="embedding", api_key_env="X")
    tenant = make_tenant()
    api_key = ApiKey.objects.select_related("group__account").get(pk=tenant.api_key_id)

    models = {m.model: m for m in payer_map(api_key=api_key).models}

    assert sorted(models) == ["closed-model", "keyless-model", "named-model", "pooled-model"]
    # A variable named counts as a key (the gateway's environment holds it), here unset.
    assert (models["named-model"].payer, models["named-model"].attempts[0].provider) == (
        "platform",
        "a-named",
    )
    assert len(models["named-model"].attempts) == 1  # g-clash's embedding offer is not one
    assert models["pooled-model"].payer == "platform"  # its platform key row serves
    for refused, provider in (("keyless-model", "b-keyless"), ("closed-model", "c-closed")):
        assert (models[refused].payer, models[refused].code, models[refused].reason) == (
            "refused",
            "LM-3021",
            f"No team key for {provider}: platform serving is off.",
        )


@pytest.mark.django_db
def test_a_revoked_expired_or_suspended_key_is_refused_for_every_model():
    from datetime import timedelta

    from django.utils import timezone

    from accounts.models import Account, ApiKey
    from byok.payer_map import payer_map
    from tests.support.tenants import make_tenant

    served("a-open", "openai", "open-model", api_key_env="X")
    tenant = make_tenant()

    def refusal() -> tuple[str, str, str]:
        api_key = ApiKey.objects.select_related("group__account").get(pk=tenant.api_key_id)
        [entry] = payer_map(api_key=api_key).models
        return entry.payer, entry.code, entry.reason

    assert refusal() == ("platform", "", "")
    Account.objects.filter(pk=tenant.account_id).update(suspended_at=timezone.now())
    assert refusal()[:2] == ("refused", "LM-1004")
    ApiKey.objects.filter(pk=tenant.api_key_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert refusal() == ("refused", "LM-1001", "API key expired.")
    ApiKey.objects.filter(pk=tenant.api_key_id).update(revoked_at=timezone.now())
    assert refusal() == ("refused", "LM-1001", "Missing, unknown, revoked or expired API key.")
