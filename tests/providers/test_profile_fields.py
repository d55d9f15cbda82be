"""The profile JSON's optional fields: passthrough, model aliases and cache prices.

Applied by the bootstrap (absent means the default, so an older spec loads as before),
refused with a message naming what is wrong, and shown and edited in the Django admin.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from providers.models import ProviderModel, ProviderProfile
from providers.spec import model_kind_problem, profiles_bootstrap, read_profiles_spec
from tests.support.money import typed_dollars

pytestmark = pytest.mark.django_db


def spec(**profile_fields) -> list[dict]:
    models = profile_fields.pop(
        "models",
        [
            {
                "name": "claude-3-5-haiku",
                "upstream": "claude-3-5-haiku-20241022",
                "input_micro_per_mtok": 800_000,
                "output_micro_per_mtok": 4_000_000,
                "cached_input_micro_per_mtok": 80_000,
                "cache_write_micro_per_mtok": 1_000_000,
                "aliases": ["claude-3-5-haiku-latest", "haiku"],
            },
            {"name": "claude-3-opus", "input_micro_per_mtok": 15_000_000},
        ],
    )
    return [
        {
            "name": "anthropic-main",
            "kind": "anthropic",
            "base_url": "https://api.example.invalid",
            "models": models,
            **profile_fields,
        }
    ]


def test_a_model_is_a_chat_model_unless_marked_an_embedding_or_moderation_model():
    profiles_bootstrap(
        spec=spec(
            kind="openai",
            models=[
                {"name": "gpt-4o-mini"},
                {"name": "text-embedding-3-small", "kind": "embedding"},
                {"name": "omni-moderation-latest", "kind": "moderation"},
            ],
        )
    )

    kinds = dict(ProviderModel.objects.values_list("name", "kind"))
    assert kinds == {
        "gpt-4o-mini": "chat",
        "text-embedding-3-small": "embedding",
        "omni-moderation-latest": "moderation",
    }


@pytest.mark.parametrize(
    ("kind", "served"),
    [("openai", True), ("openai_compatible", True), ("openrouter", False), ("azure", False)],
)
def test_moderation_models_only_on_kinds_with_openais_moderations_route(kind, served):
    assert model_kind_problem("moderation", kind) == (
        None if served else f"a {kind} profile serves no moderation models"
    )


def model_fields(name: str) -> tuple:
    return ProviderModel.objects.filter(name=name).values_list(
        "aliases", "cached_input_micro_per_mtok", "cache_write_micro_per_mtok"
    )[0]


def test_bootstrap_stores_the_new_fields():
    profiles_bootstrap(spec=read_profiles_spec(json.dumps(spec(passthrough=True))))

    assert ProviderProfile.objects.get(name="anthropic-main").passthrough is True
    assert model_fields("claude-3-5-haiku") == (
        ["claude-3-5-haiku-latest", "haiku"],
        80_000,
        1_000_000,
    )


def test_absent_fields_mean_no_passthrough_no_aliases_and_the_input_price():
    profiles_bootstrap(spec=spec(passthrough=True))

    # The same profile again without the fields: the JSON is the truth, so they reset.
    bare = spec(models=[{"name": "claude-3-5-haiku", "input_micro_per_mtok": 800_000}])
    profiles_bootstrap(spec=read_profiles_spec(json.dumps(bare)))

    assert ProviderProfile.objects.get(name="anthropic-main").passthrough is False
    assert model_fields("claude-3-5-haiku") == ([], None, None)


def test_a_null_cache_price_is_the_same_as_leaving_it_out():
    models = [{"name": "m", "cached_input_micro_per_mtok": None, "cache_write_micro_per_mtok": 0}]
    profiles_bootstrap(spec=read_profiles_spec(json.dumps(spec(models=models))))

    assert model_fields("m") == ([], None, 0)


def test_one_alias_may_be_given_by_two_profiles():
    second = {**spec()[0], "name": "anthropic-backup"}

    profiles_bootstrap(spec=read_profiles_spec(json.dumps([*spec(), second])))

    assert [m.aliases for m in ProviderModel.objects.filter(name="claude-3-5-haiku")] == [
        ["claude-3-5-haiku-latest", "haiku"]
    ] * 2


def _model(**fields) -> dict:
    return {"name": "claude-3-5-haiku", **fields}


@pytest.mark.parametrize(
    ("profile_fields", "named"),
    [
        ({"passthrough": "yes"}, r"\[0\]: 'passthrough' must be true or false"),
        ({"models": [_model(aliases="haiku")]}, r"models\[0\]: 'aliases' must be a list"),
        ({"models": [_model(aliases=[""])]}, r"models\[0\]: an alias must be a non-empty string"),
        ({"models": [_model(aliases=[7])]}, "an alias must be a non-empty string"),
        ({"models": [_model(aliases=["a,b"])]}, "alias 'a,b' has a comma"),
        ({"models": [_model(aliases=[" haiku"])]}, "has surrounding spaces"),
        (
            {"models": [_model(aliases=["opus"]), {"name": "opus"}]},
            r"\[0\]: alias 'opus' is already a model name or alias of this profile",
        ),
        (
            {"models": [_model(aliases=["fast"]), {"name": "opus", "aliases": ["fast"]}]},
            "alias 'fast' is already a model name or alias",
        ),
        (
            {"models": [_model(aliases=["claude-3-5-haiku"])]},
            "alias 'claude-3-5-haiku' is already a model name",
        ),
        (
            {"models": [_model(cached_input_micro_per_mtok=-1)]},
            r"models\[0\]: 'cached_input_micro_per_mtok' must be a non-negative integer",
        ),
        (
            {"models": [_model(cache_write_micro_per_mtok="1000")]},
            "'cache_write_micro_per_mtok' must be a non-negative integer",
        ),
        (
            {"models": [_model(cache_write_micro_per_mtok=True)]},
            "'cache_write_micro_per_mtok' must be a non-negative integer",
        ),
        (
            {"models": [_model(kind="vision")]},
            r"models\[0\]: 'kind' must be one of \['chat', 'embedding', 'moderation'\]",
        ),
        (
            {"models": [_model(kind="embedding")]},
            r"models\[0\]: a anthropic profile serves no embedding models",
        ),
        (
            {"models": [_model(kind="moderation")]},
            r"models\[0\]: a anthropic profile serves no moderation models",
        ),
    ],
)
def test_malformed_new_fields_are_refused_naming_what_is_wrong(profile_fields, named):
    raw = json.dumps(spec(**profile_fields))
    with pytest.raises(ImproperlyConfigured, match="Malformed setting PROVIDER_PROFILES_JSON"):
        read_profiles_spec(raw)
    with pytest.raises(ImproperlyConfigured, match=named):
        read_profiles_spec(raw)
    # The service refuses it too, whoever calls it: nothing is stored.
    with pytest.raises(ImproperlyConfigured, match=named):
        profiles_bootstrap(spec=json.loads(raw))
    assert not ProviderProfile.objects.exists()


# ---------------------------------------------------------------- the admin


@pytest.fixture
def admin_client() -> Client:
    operator = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client = Client()
    client.force_login(operator)
    return client


def admin_form(profile: ProviderProfile, **model_values: dict) -> dict:
    """The change form of `profile` as the admin renders it, with `model_values` changed."""
    models = list(profile.models.order_by("pk"))
    form = {
        "name": profile.name,
        "kind": profile.kind,
        "base_url": profile.base_url,
        "api_key_env": "",
        "allows_platform": "on",
        "enabled": "on",
        "passthrough": "on",
        "timeout_s": "60",
        "stream_idle_timeout_s": "30",
        "platform_key": "",
        "key_strategy": profile.key_strategy,
        "platform_keys-TOTAL_FORMS": "0",
        "platform_keys-INITIAL_FORMS": "0",
        "models-TOTAL_FORMS": str(len(models)),
        "models-INITIAL_FORMS": str(len(models)),
        "models-MIN_NUM_FORMS": "0",
        "models-MAX_NUM_FORMS": "1000",
    }
    for index, model in enumerate(models):
        values = {
            "id": str(model.pk),
            "profile": str(profile.pk),
            "name": model.name,
            "upstream": model.upstream,
            "kind": model.kind,
            "aliases": ", ".join(model.aliases),
            # Prices are typed in dollars per million tokens.
            "input_micro_per_mtok": typed_dollars(model.input_micro_per_mtok),
            "output_micro_per_mtok": typed_dollars(model.output_micro_per_mtok),
            "cached_input_micro_per_mtok": "",
            "cache_write_micro_per_mtok": "",
            "max_output_tokens": str(model.max_output_tokens),
            **({"cacheable": "on"} if model.cacheable else {}),
            "cache_max_ttl_s": str(model.cache_max_ttl_s),
            "cache_hit_price_pct": str(model.cache_hit_price_pct),
            **model_values.get(model.name, {}),
        }
        form.update({f"models-{index}-{key}": value for key, value in values.items()})
    return form


def test_the_admin_shows_and_saves_the_new_fields(admin_client):
    [profile] = profiles_bootstrap(spec=spec())
    url = f"/django-admin/providers/providerprofile/{profile.pk}/change/"

    page = admin_client.get(url).content.decode()
    assert 'name="passthrough"' in page
    assert 'value="claude-3-5-haiku-latest, haiku"' in page
    # $0.08 per million tokens (80,000 micro-USD), shown and typed in dollars.
    assert 'name="models-0-cached_input_micro_per_mtok" value="0.08"' in page
    assert 'name="models-0-cache_write_micro_per_mtok"' in page

    saved = admin_client.post(
        url,
        admin_form(
            profile,
            **{
                "claude-3-5-haiku": {
                    "aliases": "haiku-latest ,, haiku",
                    "cached_input_micro_per_mtok": "0.09",
                }
            },
        ),
    )

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert ProviderProfile.objects.get(pk=profile.pk).passthrough is True
    assert model_fields("claude-3-5-haiku") == (["haiku-latest", "haiku"], 90_000, None)
    assert model_fields("claude-3-opus") == ([], None, None)


def cache_terms(name: str) -> tuple:
    return ProviderModel.objects.filter(name=name).values_list(
        "cacheable", "cache_max_ttl_s", "cache_hit_price_pct"
    )[0]


def test_the_response_cache_terms_default_to_not_cacheable_and_load_from_json():
    models = [
        {"name": "kept", "cacheable": True, "cache_max_ttl_s": 600, "cache_hit_price_pct": 25},
        {"name": "plain"},
    ]
    profiles_bootstrap(spec=read_profiles_spec(json.dumps(spec(models=models))))

    assert cache_terms("kept") == (True, 600, 25)
    assert cache_terms("plain") == (False, 86_400, 10)  # the documented defaults


@pytest.mark.parametrize(
    ("terms", "named"),
    [
        ({"cacheable": "yes"}, "'cacheable' must be true or false"),
        ({"cache_max_ttl_s": 0}, "'cache_max_ttl_s' must be whole seconds from 1 to 2592000"),
        ({"cache_max_ttl_s": 1.5}, "'cache_max_ttl_s' must be whole seconds"),
        ({"cache_hit_price_pct": 101}, "'cache_hit_price_pct' must be a whole percent"),
        ({"cache_hit_price_pct": True}, "'cache_hit_price_pct' must be a whole percent"),
    ],
)
def test_malformed_cache_terms_are_refused(terms, named):
    raw = json.dumps(spec(models=[{"name": "m", **terms}]))
    with pytest.raises(ImproperlyConfigured, match=named):
        read_profiles_spec(raw)


def test_the_admin_marks_a_model_cacheable(admin_client):
    [profile] = profiles_bootstrap(spec=spec())
    url = f"/django-admin/providers/providerprofile/{profile.pk}/change/"
    assert 'name="models-0-cacheable"' in admin_client.get(url).content.decode()

    terms = {"cacheable": "on", "cache_max_ttl_s": "3600", "cache_hit_price_pct": "20"}
    saved = admin_client.post(url, admin_form(profile, **{"claude-3-opus": terms}))

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert cache_terms("claude-3-opus") == (True, 3600, 20)
    assert cache_terms("claude-3-5-haiku") == (False, 86_400, 10)
    refused = admin_client.post(
        url, admin_form(profile, **{"claude-3-opus": {**terms, "cache_hit_price_pct": "150"}})
    )
    assert refused.status_code == 200 and cache_terms("claude-3-opus")[2] == 20


def test_the_admin_refuses_an_alias_that_names_another_model(admin_client):
    [profile] = profiles_bootstrap(spec=spec())
    url = f"/django-admin/providers/providerprofile/{profile.pk}/change/"

    refused = admin_client.post(url, admin_form(profile, **{"claude-3-opus": {"aliases": "haiku"}}))

    assert refused.status_code == 200
    assert "Alias &#x27;haiku&#x27; is already a model name or alias" in refused.content.decode()
    assert model_fields("claude-3-opus") == ([], None, None)


def test_the_admin_refuses_an_embedding_model_on_a_profile_that_serves_none(admin_client):
    [profile] = profiles_bootstrap(spec=spec())
    url = f"/django-admin/providers/providerprofile/{profile.pk}/change/"

    refused = admin_client.post(
        url, admin_form(profile, **{"claude-3-5-haiku": {"kind": "embedding"}})
    )

    assert refused.status_code == 200
    assert "claude-3-5-haiku: a anthropic profile serves no embedding models." in (
        refused.content.decode()
    )
    assert profile.models.get(name="claude-3-5-haiku").kind == "chat"
