"""core.config: Tollgate's settings as one typed object, rebuilt when a test changes them."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.config import TOP_LEVEL, TollgateSettings, from_django, tollgate


def test_every_tollgate_setting_has_its_field(settings):
    conf = tollgate()

    for key, value in settings.TOLLGATE.items():
        expected = tuple(value) if key == "WEB_ALLOW_NETS" else value
        assert getattr(conf, key.lower()) == expected
    assert conf.byok_enabled is settings.GATEWAY_BYOK_ENABLED
    assert conf.ptb_enabled is settings.GATEWAY_PTB_ENABLED
    assert conf.internal_token == settings.GATEWAY_INTERNAL_TOKEN
    assert conf.web_internal_tokens == settings.WEB_FETCH_INTERNAL_TOKENS
    assert isinstance(conf.metrics_dir, Path)


def test_the_object_is_built_once_and_frozen():
    conf = tollgate()

    assert tollgate() is conf
    with pytest.raises(AttributeError):
        conf.max_route = 9  # the point: frozen refuses it


def test_a_changed_setting_is_seen_on_the_next_call(settings):
    before = tollgate()

    settings.TOLLGATE = {**settings.TOLLGATE, "MAX_ROUTE": before.max_route + 1}
    settings.GATEWAY_PTB_ENABLED = not before.ptb_enabled

    assert tollgate().max_route == before.max_route + 1
    assert tollgate().ptb_enabled is not before.ptb_enabled


def test_a_key_without_a_field_is_refused(settings):
    with pytest.raises(ImproperlyConfigured, match="NEW_KNOB"):
        from_django({**settings.TOLLGATE, "NEW_KNOB": 1}, _top_level(settings))


def test_a_missing_key_is_refused(settings):
    conf = {key: value for key, value in settings.TOLLGATE.items() if key != "MAX_ROUTE"}

    with pytest.raises(ImproperlyConfigured, match="MAX_ROUTE"):
        from_django(conf, _top_level(settings))


@pytest.mark.parametrize(("key", "value"), [("MAX_ROUTE", "3"), ("REPLICAS", True)])
def test_a_value_of_the_wrong_type_is_refused(settings, key, value):
    with pytest.raises(ImproperlyConfigured, match=f"Malformed setting {key}: expected int"):
        from_django({**settings.TOLLGATE, key: value}, _top_level(settings))


def test_secrets_stay_out_of_the_repr(settings):
    settings.TOLLGATE = {**settings.TOLLGATE, "CALLER_KEY": "caller-secret-value"}

    assert "caller-secret-value" not in repr(tollgate())
    assert {f.name for f in fields(TollgateSettings) if not f.repr} == {
        "caller_key",
        "usage_sink_secret",
        "metrics_token",
        "internal_token",
        "web_internal_tokens",
        "cache_redis_url",  # a Redis URL may carry its password
    }


def _top_level(settings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in TOP_LEVEL.values()}
