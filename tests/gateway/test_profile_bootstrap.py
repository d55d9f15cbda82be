"""PROVIDER_PROFILES_JSON: the contract format, inline or a file, applied idempotently."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from providers.models import ProviderModel, ProviderProfile
from providers.spec import read_profiles_spec

SPEC = [
    {
        "name": "openai-main",
        "kind": "openai",
        "base_url": "https://api.example.invalid/v1",
        "api_key_env": "OPENAI_MAIN_KEY",
        "allows_platform": True,
        "timeout_s": 60,
        "models": [
            {
                "name": "gpt-4o-mini",
                "upstream": "gpt-4o-mini",
                "input_micro_per_mtok": 150000,
                "output_micro_per_mtok": 600000,
            }
        ],
    }
]

pytestmark = pytest.mark.django_db


def test_load_profiles_applies_inline_json_and_is_idempotent(capsys):
    call_command("load_profiles", "--json", json.dumps(SPEC))
    call_command("load_profiles", "--json", json.dumps(SPEC))

    profile = ProviderProfile.objects.get(name="openai-main")
    assert (
        profile.kind,
        profile.base_url,
        profile.api_key_env,
        profile.allows_platform,
        profile.timeout_s,
    ) == ("openai", "https://api.example.invalid/v1", "OPENAI_MAIN_KEY", True, 60)
    assert list(
        ProviderModel.objects.values_list(
            "name", "upstream", "input_micro_per_mtok", "output_micro_per_mtok"
        )
    ) == [("gpt-4o-mini", "gpt-4o-mini", 150_000, 600_000)]
    assert "loaded 1 profile(s): openai-main" in capsys.readouterr().out


def test_a_file_path_works_too(tmp_path, settings):
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(SPEC))
    settings.PROVIDER_PROFILES_JSON = str(path)

    call_command("load_profiles")

    assert ProviderProfile.objects.filter(name="openai-main").exists()


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("[{", "PROVIDER_PROFILES_JSON"),
        ("/no/such/file.json", "PROVIDER_PROFILES_JSON"),
        ('[{"name": "x", "kind": "warp-drive"}]', "unknown kind"),
        ('[{"name": "x", "kind": "openai", "colour": "red"}]', "unknown field colour"),
        (
            '[{"name": "x", "kind": "openai", "models": [{"name": "m", "price": 1}]}]',
            "unknown field price",
        ),
    ],
)
def test_malformed_profiles_are_refused_naming_what_is_wrong(raw, named):
    with pytest.raises(ImproperlyConfigured, match=named):
        read_profiles_spec(raw)


def test_a_gateway_applies_the_setting_at_start(transactional_db, spawn_gateway, stub):
    from tests.support.profiles import PLATFORM_KEY

    spec = [
        {
            "name": "boot-stub",
            "kind": "openai",
            "base_url": f"{stub.url}/v1",
            "api_key_env": "BOOT_STUB_KEY",
            "models": [
                {"name": "boot-model", "input_micro_per_mtok": 1, "output_micro_per_mtok": 1}
            ],
        }
    ]
    gateway = spawn_gateway(PROVIDER_PROFILES_JSON=json.dumps(spec), BOOT_STUB_KEY=PLATFORM_KEY)

    import httpx

    from tests.support.tenants import make_tenant

    tenant = make_tenant()
    gateway.reload()
    stub.clear()
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={"model": "boot-model", "messages": [{"role": "user", "content": "hi"}]},
    )

    assert response.status_code == 200, response.text
    assert ProviderProfile.objects.get(name="boot-stub").api_key_last4 == PLATFORM_KEY[-4:]
    assert [(c["model"], c["key"]) for c in stub.vendor_calls()] == [("boot-model", PLATFORM_KEY)]
