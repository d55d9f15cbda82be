"""The catalog: canonical names, aliases and pins, cache prices, and what it loads."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from core.money import TokenPrices
from gateway.adapters.fake import FakeProvider
from gateway.catalog import Catalog, ModelOffer, Profile, load_catalog


def profile(name: str, kind: str = "anthropic") -> Profile:
    return Profile(
        name=name,
        kind=kind,
        base_url=f"https://{name}.example",
        platform_key=f"sk-{name}",
        allows_platform=True,
        timeout_s=60.0,
        idle_timeout_s=30.0,
        adapter=FakeProvider(),
    )


def offer(prof: Profile, name: str, *aliases: str, **prices: Any) -> ModelOffer:
    return ModelOffer(
        profile=prof,
        name=name,
        upstream=f"{name}-upstream",
        prices=TokenPrices.configured(
            input_micro_per_mtok=prices.pop("input_micro_per_mtok", 800_000),
            output_micro_per_mtok=4_000_000,
            **prices,
        ),
        max_output_tokens=8_192,
        aliases=aliases,
    )


def catalog(*offers: ModelOffer) -> Catalog:
    by_model: dict[str, tuple[ModelOffer, ...]] = {}
    for o in offers:
        by_model[o.name] = (*by_model.get(o.name, ()), o)
    return Catalog(profiles={o.profile.name: o.profile for o in offers}, offers_by_model=by_model)


MAIN, BACKUP, ROUTER = profile("anthropic-main"), profile("anthropic-backup"), profile("router")
HAIKU_MAIN = offer(MAIN, "claude-3-5-haiku", "claude-3-5-haiku-latest", "haiku")
HAIKU_BACKUP = offer(BACKUP, "claude-3-5-haiku")
OPUS = offer(MAIN, "claude-3-opus")


def test_an_alias_resolves_to_every_offer_of_its_canonical_model():
    cat = catalog(HAIKU_MAIN, HAIKU_BACKUP, OPUS)

    assert cat.resolve("claude-3-5-haiku-latest") == (HAIKU_MAIN, HAIKU_BACKUP)
    assert cat.resolve("haiku") == cat.resolve("claude-3-5-haiku")
    assert {o.name for o in cat.resolve("haiku")} == {"claude-3-5-haiku"}
    assert cat.resolve("claude-3-opus") == (OPUS,)
    assert cat.resolve("sonnet") == ()


def test_a_pin_resolves_a_name_or_an_alias_within_its_profile():
    cat = catalog(HAIKU_MAIN, HAIKU_BACKUP, OPUS)

    assert cat.resolve("anthropic-main/claude-3-5-haiku") == (HAIKU_MAIN,)
    assert cat.resolve("anthropic-main/haiku") == (HAIKU_MAIN,)
    assert cat.resolve("anthropic-backup/claude-3-5-haiku") == (HAIKU_BACKUP,)
    # The backup profile did not give the model that alias.
    assert cat.resolve("anthropic-backup/haiku") == ()
    assert cat.resolve("nowhere/haiku") == ()


def test_a_canonical_name_wins_over_another_profiles_alias():
    # The router calls its own model "claude-3-opus" by the alias of main's canonical name.
    router_opus = offer(ROUTER, "router-opus", "claude-3-opus")
    cat = catalog(OPUS, router_opus)

    assert cat.resolve("claude-3-opus") == (OPUS,)
    assert cat.aliases() == {}
    # Pinned, the alias still names the router's own model.
    assert cat.resolve("router/claude-3-opus") == (router_opus,)


def test_an_alias_two_profiles_give_to_different_models_names_the_first_profiles(caplog):
    mine = offer(MAIN, "claude-3-5-haiku", "fast")
    theirs = offer(ROUTER, "router-mini", "fast")

    with caplog.at_level(logging.WARNING, logger="gateway.catalog"):
        cat = catalog(theirs, mine)

    assert cat.resolve("fast") == (mine,)  # "anthropic-main" sorts before "router"
    assert cat.resolve("router/fast") == (theirs,)
    assert "alias fast of router/router-mini already names model claude-3-5-haiku" in caplog.text


def test_model_names_are_canonical_and_aliases_name_their_model():
    cat = catalog(HAIKU_MAIN, HAIKU_BACKUP, OPUS)

    assert cat.model_names() == ["claude-3-5-haiku", "claude-3-opus"]
    assert cat.aliases() == {
        "claude-3-5-haiku-latest": "claude-3-5-haiku",
        "haiku": "claude-3-5-haiku",
    }


@pytest.mark.django_db
def test_load_catalog_reads_passthrough_aliases_and_cache_prices():
    from providers.spec import profiles_bootstrap

    profiles_bootstrap(
        spec=[
            {
                "name": "anthropic-main",
                "kind": "anthropic",
                "base_url": "https://api.example.invalid",
                "passthrough": True,
                "models": [
                    {
                        "name": "claude-3-5-haiku",
                        "upstream": "claude-3-5-haiku-20241022",
                        "input_micro_per_mtok": 800_000,
                        "cache_write_micro_per_mtok": 1_000_000,
                        "aliases": ["claude-3-5-haiku-latest"],
                    }
                ],
            },
            {
                "name": "openai-main",
                "kind": "openai",
                "base_url": "https://api.example.invalid/v1",
                "models": [{"name": "gpt-4o-mini", "input_micro_per_mtok": 150_000}],
            },
        ]
    )

    cat = load_catalog(session=None, vendors=None)

    assert cat.profiles["anthropic-main"].passthrough is True
    assert cat.profiles["openai-main"].passthrough is False
    [haiku] = cat.resolve("claude-3-5-haiku-latest")
    assert (
        haiku.name,
        haiku.upstream,
        haiku.aliases,
        haiku.prices.cached_input_micro_per_mtok,
        haiku.prices.cache_write_micro_per_mtok,
    ) == (
        "claude-3-5-haiku",
        "claude-3-5-haiku-20241022",
        ("claude-3-5-haiku-latest",),
        800_000,
        1_000_000,
    )
    [mini] = cat.resolve("gpt-4o-mini")
    assert (mini.aliases, mini.prices.cached_input_micro_per_mtok) == ((), 150_000)


@pytest.mark.django_db
def test_a_model_name_answers_one_kind_the_first_profiles_by_name():
    from providers.spec import profiles_bootstrap

    def profile(name: str, kind: str) -> dict:
        return {
            "name": name,
            "kind": "openai_compatible",
            "base_url": "https://api.example.invalid/v1",
            "models": [{"name": "m", "kind": kind}, {"name": f"only-{name}", "kind": kind}],
        }

    profiles_bootstrap(spec=[profile("b-chat", "chat"), profile("a-embed", "embedding")])

    cat = load_catalog(session=None, vendors=None)

    assert [(o.profile.name, o.kind) for o in cat.resolve("m")] == [("a-embed", "embedding")]
    assert cat.kind_of("m") == "embedding"
    assert (cat.kind_of("only-b-chat"), cat.kind_of("only-a-embed")) == ("chat", "embedding")
