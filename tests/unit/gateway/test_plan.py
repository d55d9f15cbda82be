"""gateway.plan.build_plan on a catalog built in memory: links, attempts, refusals, output
caps and escrow budgets.

Every request here has one message, "hello there": 11 bytes, so its prompt bound is
11 + 8 + 8 = 27 tokens. A worst case is ceil((27 x input + max_tokens x output) / 10^6)
micro-USD, times the 120 % margin, rounded up: gpt-4o-mini with max_tokens 100 costs
ceil(64.05) = 65, held as 78.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from accounts.model_access import policy_of
from byok.pools import Pool, PoolKey
from core.errors import Forbidden, InvalidRequest
from core.money import TokenPrices
from gateway.adapters.fake import FakeProvider
from gateway.attempts import PLATFORM, TEAM
from gateway.auth import Principal
from gateway.catalog import Catalog, ModelOffer, Profile
from gateway.plan import build_plan
from gateway.shapes import openai as openai_shape
from gateway.types import ModelRequest

GROUP = 7


def profile(name: str, kind: str = "openai", **fields: Any) -> Profile:
    values: dict[str, Any] = {
        "base_url": f"https://{name}.example",
        "platform_key": f"sk-{name}",
        "allows_platform": True,
        "timeout_s": 60.0,
        "idle_timeout_s": 30.0,
    }
    values.update(fields)
    return Profile(name=name, kind=kind, adapter=FakeProvider(), **values)


def offer(prof: Profile, name: str, in_micro: int, out_micro: int, cap: int) -> ModelOffer:
    return ModelOffer(
        profile=prof,
        name=name,
        upstream=f"{name}-upstream",
        prices=TokenPrices.configured(
            input_micro_per_mtok=in_micro, output_micro_per_mtok=out_micro
        ),
        max_output_tokens=cap,
    )


OPENAI = profile("openai-main")
ANTHROPIC = profile("anthropic-main", kind="anthropic")
OFFERS = [
    offer(OPENAI, "gpt-4o-mini", 150_000, 600_000, 16_384),
    offer(OPENAI, "gpt-4o", 2_500_000, 10_000_000, 16_384),
    offer(ANTHROPIC, "claude-3-5-haiku", 800_000, 4_000_000, 8_192),
    # One canonical model from three providers: per-token sums 200,000 / 130,000 / 130,000.
    offer(profile("together"), "llama", 100_000, 100_000, 4_096),
    offer(profile("groq"), "llama", 50_000, 80_000, 4_096),
    offer(profile("deepinfra"), "llama", 30_000, 100_000, 4_096),
]


def catalog(offers=OFFERS) -> Catalog:
    by_model: dict[str, tuple[ModelOffer, ...]] = {}
    for o in offers:
        by_model[o.name] = (*by_model.get(o.name, ()), o)
    return Catalog(profiles={o.profile.name: o.profile for o in offers}, offers_by_model=by_model)


def request(*chain: str, max_tokens: int | None = 100) -> ModelRequest:
    return openai_shape.parse_request(
        {
            "model": ",".join(chain),
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": max_tokens,
        }
    )


def principal(**fields: Any) -> Principal:
    values: dict[str, Any] = {
        "account_id": 1,
        "billing_mode": "prepaid",
        "group_id": GROUP,
        "group_budget_max_micro": None,
        "group_rpm": None,
        "group_tpm": None,
        "group_concurrency": None,
        "bandwidth_micro_per_gb": 0,
    }
    values.update(fields)
    return Principal(**values)


def pool(provider: str, *, fallback: bool) -> Pool:
    return Pool(GROUP, provider, fallback, (PoolKey(1, "team-1", "sk-team-1"),))


def pools(*found: Pool):
    by_provider = {(p.group_id, p.provider): p for p in found}
    return lambda group_id, provider: by_provider.get((group_id, provider))


def no_pools(group_id: int, provider: str) -> None:
    return None


def attempts(link) -> list[tuple[str, str, bool, int]]:
    return [(a.served_by, a.source, a.needs_escrow, a.escrow_budget_micro) for a in link.attempts]


# ---------------------------------------------------------------- links


def test_links_follow_the_clients_chain_in_its_order_not_by_price():
    plan = build_plan(request("gpt-4o", "gpt-4o-mini"), principal(), catalog(), no_pools)

    assert [(link.order, link.offer.name) for link in plan.links] == [
        (1, "gpt-4o"),
        (2, "gpt-4o-mini"),
    ]
    # gpt-4o: ceil(1067.5) = 1068, held as ceil(1281.6) = 1282.
    assert [attempts(link) for link in plan.links] == [
        [(PLATFORM, "openai-main:gpt-4o:platform", True, 1282)],
        [(PLATFORM, "openai-main:gpt-4o-mini:platform", True, 78)],
    ]
    assert [link.breaker_key for link in plan.links] == ["openai-main", "openai-main"]
    assert plan.budget_estimate_micro == 1282  # the most expensive link's worst case


def test_a_canonical_model_fans_out_cheapest_first_with_ties_ranked_by_profile_name():
    plan = build_plan(request("llama"), principal(), catalog(), no_pools)

    assert [link.offer.profile.name for link in plan.links] == ["deepinfra", "groq", "together"]
    assert [link.order for link in plan.links] == [1, 2, 3]
    # ceil(10.81) = 11 -> 14, ceil(9.35) = 10 -> 12, ceil(12.7) = 13 -> 16.
    assert [attempts(link)[0][3] for link in plan.links] == [14, 12, 16]
    assert plan.budget_estimate_micro == 16


def test_a_pinned_model_is_served_by_its_profile_only():
    plan = build_plan(request("groq/llama"), principal(), catalog(), no_pools)

    assert [(link.offer.profile.name, link.offer.name) for link in plan.links] == [
        ("groq", "llama")
    ]


def test_without_max_tokens_a_link_assumes_its_models_output_cap():
    plan = build_plan(request("gpt-4o-mini", max_tokens=None), principal(), catalog(), no_pools)

    (link,) = plan.links
    assert link.max_tokens == 16_384
    # ceil((27 x 150,000 + 16,384 x 600,000) / 10^6) = 9835, x 1.2 = 11802.
    assert attempts(link) == [(PLATFORM, "openai-main:gpt-4o-mini:platform", True, 11_802)]


def test_the_escrow_margin_setting_scales_every_worst_case(settings):
    settings.TOLLGATE = {**settings.TOLLGATE, "ESCROW_MARGIN_PCT": 150}

    plan = build_plan(request("gpt-4o-mini"), principal(), catalog(), no_pools)

    assert plan.links[0].attempts[0].escrow_budget_micro == 98  # ceil(65 x 1.5)


# ---------------------------------------------------------------- refusals


def test_a_route_list_over_the_setting_is_refused_before_any_offer_is_looked_up(settings):
    # Three models, the last unknown: the length is refused first, by its setting.
    with pytest.raises(InvalidRequest) as refused:
        build_plan(request("gpt-4o-mini", "llama", "nope"), principal(), catalog(), no_pools)
    assert refused.value.message == (
        "The route list names 3 models; at most 2 are allowed "
        "(the model and its fallbacks together)."
    )

    settings.TOLLGATE = {**settings.TOLLGATE, "MAX_ROUTE": 3}
    plan = build_plan(
        request("gpt-4o-mini", "gpt-4o", "claude-3-5-haiku"), principal(), catalog(), no_pools
    )
    assert [link.offer.name for link in plan.links] == ["gpt-4o-mini", "gpt-4o", "claude-3-5-haiku"]


def test_an_unknown_model_is_refused_lm_2001():
    with pytest.raises(InvalidRequest) as refused:
        build_plan(request("gpt-4o-mini", "nope"), principal(), catalog(), no_pools)

    assert (refused.value.code, refused.value.message) == (
        "LM-2001",
        "Unknown model 'nope'. GET /v1/models lists the models this key may use.",
    )


def test_a_misspelt_model_is_answered_with_the_nearest_one_the_key_may_use():
    with pytest.raises(InvalidRequest) as refused:
        build_plan(request("gpt-4o-mini", "gpt-4o-mnii"), principal(), catalog(), no_pools)

    assert refused.value.message == (
        "Unknown model 'gpt-4o-mnii'. Did you mean 'gpt-4o-mini'?"
        " GET /v1/models lists the models this key may use."
    )


def test_the_hint_never_names_a_model_the_key_may_not_use():
    only_claude = principal(access=policy_of(key_names=["claude-3-5-haiku"]))
    with pytest.raises(InvalidRequest) as refused:
        build_plan(request("claude-3-5-haiku", "gpt-4o-mnii"), only_claude, catalog(), no_pools)

    assert "Did you mean" not in refused.value.message


def test_a_model_the_key_may_not_use_is_refused_lm_1003():
    allowed = principal(access=policy_of(key_names=["gpt-4o-mini"]))

    with pytest.raises(Forbidden) as refused:
        build_plan(request("gpt-4o-mini", "gpt-4o"), allowed, catalog(), no_pools)

    assert (refused.value.code, refused.value.message) == (
        "LM-1003",
        "This key may not use model 'gpt-4o'. It may use: gpt-4o-mini (GET /v1/models lists them).",
    )


def test_a_pinned_model_is_allowed_when_the_key_may_use_its_model():
    allowed = principal(access=policy_of(key_names=["gpt-4o-mini"]))

    plan = build_plan(request("openai-main/gpt-4o-mini"), allowed, catalog(), no_pools)

    assert [link.offer.name for link in plan.links] == ["gpt-4o-mini"]


def test_max_tokens_over_a_models_cap_is_refused_lm_2001():
    with pytest.raises(InvalidRequest) as refused:
        build_plan(request("claude-3-5-haiku", max_tokens=9_000), principal(), catalog(), no_pools)

    assert refused.value.message == "'max_tokens' 9000 is over claude-3-5-haiku's cap of 8192."


# ---------------------------------------------------------------- team and platform


def test_a_team_pool_with_fallback_off_serves_team_only_and_locks_the_rest_of_the_chain():
    team = pool("openai-main", fallback=False)

    plan = build_plan(
        request("gpt-4o-mini", "claude-3-5-haiku"), principal(), catalog(), pools(team)
    )

    first, second = plan.links
    assert attempts(first) == [(TEAM, "openai-main:gpt-4o-mini:team", False, 0)]
    assert first.attempts[0].pool is team
    assert (first.team_scoped, first.breaker_key, first.pool_exhausted_refusal) == (
        True,
        "openai-main#group:7",
        True,
    )
    # No pool for Anthropic, and the chain is locked: no silent way to the platform's keys.
    assert (attempts(second), second.locked, second.breaker_key) == ([], True, "anthropic-main")
    assert plan.budget_estimate_micro == 0


def test_a_team_pool_with_fallback_on_adds_a_platform_fallback_attempt():
    team = pool("openai-main", fallback=True)

    plan = build_plan(
        request("gpt-4o-mini", "claude-3-5-haiku"), principal(), catalog(), pools(team)
    )

    first, second = plan.links
    assert attempts(first) == [
        (TEAM, "openai-main:gpt-4o-mini:team", False, 0),
        (PLATFORM, "openai-main:gpt-4o-mini:platform-fallback", True, 78),
    ]
    assert first.pool_exhausted_refusal is False
    # ceil(421.6) = 422 -> 507; the chain is not locked.
    assert (attempts(second), second.locked) == (
        [(PLATFORM, "anthropic-main:claude-3-5-haiku:platform", True, 507)],
        False,
    )
    assert plan.budget_estimate_micro == 507


def surcharged_request() -> ModelRequest:
    """A request the vendor bills beyond its tokens (web search): no price of ours covers it."""
    return openai_shape.parse_request(
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 100,
            "web_search_options": {},
        }
    )


def test_what_the_vendor_bills_beyond_tokens_is_never_served_on_platform_keys():
    with pytest.raises(InvalidRequest) as refused:
        build_plan(surcharged_request(), principal(), catalog(), no_pools)

    assert refused.value.message == (
        "'web_search_options' is billed by the vendor beyond tokens: Tollgate serves it on "
        "team keys only."
    )


def test_what_the_vendor_bills_beyond_tokens_goes_on_team_keys_without_platform_fallback():
    plan = build_plan(
        surcharged_request(), principal(), catalog(), pools(pool("openai-main", fallback=True))
    )

    assert attempts(plan.links[0]) == [(TEAM, "openai-main:gpt-4o-mini:team", False, 0)]
    assert plan.budget_estimate_micro == 0


def test_an_invoiced_account_takes_no_escrow_but_keeps_the_worst_case_as_its_budget():
    plan = build_plan(
        request("gpt-4o-mini"), principal(billing_mode="invoiced"), catalog(), no_pools
    )

    assert attempts(plan.links[0]) == [(PLATFORM, "openai-main:gpt-4o-mini:platform", False, 78)]
    assert plan.budget_estimate_micro == 78


def test_with_platform_serving_off_only_team_attempts_are_left(settings):
    settings.GATEWAY_PTB_ENABLED = False
    team = pool("openai-main", fallback=True)

    plan = build_plan(
        request("gpt-4o-mini", "claude-3-5-haiku"), principal(), catalog(), pools(team)
    )

    assert [attempts(link) for link in plan.links] == [
        [(TEAM, "openai-main:gpt-4o-mini:team", False, 0)],
        [],
    ]
    assert [link.locked for link in plan.links] == [False, False]
    assert plan.budget_estimate_micro == 0


def test_with_team_serving_off_pools_are_ignored(settings):
    settings.GATEWAY_BYOK_ENABLED = False

    plan = build_plan(
        request("gpt-4o-mini"), principal(), catalog(), pools(pool("openai-main", fallback=False))
    )

    (link,) = plan.links
    assert attempts(link) == [(PLATFORM, "openai-main:gpt-4o-mini:platform", True, 78)]
    assert (link.team_scoped, link.breaker_key) == (False, "openai-main")


def test_a_profile_without_a_platform_key_or_permission_gets_no_platform_attempt():
    keyless = replace(OPENAI, platform_key=None)
    closed = replace(ANTHROPIC, allows_platform=False)
    offers = [replace(OFFERS[0], profile=keyless), replace(OFFERS[2], profile=closed)]

    plan = build_plan(
        request("gpt-4o-mini", "claude-3-5-haiku"), principal(), catalog(offers), no_pools
    )

    assert [attempts(link) for link in plan.links] == [[], []]
    assert [link.locked for link in plan.links] == [False, False]


def test_a_kind_that_cannot_take_team_keys_never_asks_for_a_pool():
    azure = profile("azure-main", kind="azure")
    asked: list[tuple[int, str]] = []

    def pool_for(group_id: int, provider: str) -> Pool:
        asked.append((group_id, provider))
        return pool(provider, fallback=False)

    plan = build_plan(
        request("gpt-4o-mini"),
        principal(),
        catalog([offer(azure, "gpt-4o-mini", 150_000, 600_000, 16_384)]),
        pool_for,
    )

    assert asked == []
    assert attempts(plan.links[0]) == [(PLATFORM, "azure-main:gpt-4o-mini:platform", True, 78)]
