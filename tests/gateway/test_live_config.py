"""Live provider config: a profile added or changed reaches every running replica, no restart.

Through providers.spec.profiles_bootstrap or the Django admin, both of which publish on the
Redis bus; the periodic reload is the safety net when no bus message arrives. The replicas
here reload periodically only once an hour, so what they pick up came over the bus.
"""

from __future__ import annotations

import httpx
import pytest
from django.test import Client

from tests.support.money import typed_dollars
from tests.support.profiles import PLATFORM_KEY, stub_profiles
from tests.support.services import HAS_REDIS, requires_redis
from tests.support.stacks import own_stack
from tests.support.waits import wait_until

LIVE_KEY = "sk-live-profile-key-5150"


def live_profile(stub_url: str, upstream: str) -> dict:
    return {
        "name": "stub-live",
        "kind": "openai",
        "base_url": f"{stub_url}/live/v1",
        "api_key_env": "STUB_LIVE_KEY",
        "timeout_s": 5,
        "models": [
            {
                "name": "live-model",
                "upstream": upstream,
                "input_micro_per_mtok": 100_000,
                "output_micro_per_mtok": 100_000,
            }
        ],
    }


def models_of(gateway, tenant) -> list[str]:
    response = httpx.get(
        f"{gateway.url}/v1/models", headers={"Authorization": f"Bearer {tenant.api_key}"}
    )
    return [m["id"] for m in response.json()["data"]]


def answer(gateway, tenant, model: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        timeout=10,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
    )


@pytest.fixture(scope="module")
def replicas(module_gateways):
    if not HAS_REDIS:
        pytest.skip("needs Redis: set REDIS_URL")
    return [
        module_gateways(TOLLGATE_CONFIG_RELOAD_S="3600", STUB_LIVE_KEY=LIVE_KEY) for _ in range(2)
    ]


@pytest.fixture
def fleet(transactional_db, replicas, stub):
    stack = own_stack(replicas[0], stub, stub_profiles(stub.url))
    replicas[1].reload()
    return stack


@requires_redis
def test_profile_added_and_changed_by_bootstrap_reaches_every_replica(fleet, replicas):
    from providers.spec import profiles_bootstrap

    tenant = fleet.tenant()
    assert all("live-model" not in models_of(gw, tenant) for gw in replicas)

    profiles_bootstrap(spec=[live_profile(fleet.stub.url, "live-upstream-1")])

    for gateway in replicas:
        wait_until(
            lambda gw=gateway: "live-model" in models_of(gw, tenant),
            timeout_s=5,
            what=f"the new profile to reach {gateway.url}",
        )
    served = [answer(gw, tenant, "live-model") for gw in replicas]
    assert [r.json()["choices"][0]["message"]["content"] for r in served] == [
        "Hello from the stub model live-upstream-1 reply ok"
    ] * 2
    assert [(c["path"], c["model"], c["key"]) for c in fleet.stub.vendor_calls()] == [
        ("/live/v1/chat/completions", "live-upstream-1", LIVE_KEY)
    ] * 2

    profiles_bootstrap(spec=[live_profile(fleet.stub.url, "live-upstream-2")])

    for gateway in replicas:
        wait_until(
            lambda gw=gateway: "live-upstream-2" in answer(gw, tenant, "live-model").text,
            timeout_s=5,
            interval_s=0.1,
            what=f"the changed profile to reach {gateway.url}",
        )


@requires_redis
def test_profile_changed_in_the_admin_reaches_every_replica(fleet, replicas):
    from django.contrib.auth import get_user_model

    from providers.models import ProviderProfile

    tenant = fleet.tenant()
    operator = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    admin = Client()
    admin.force_login(operator)
    profile = ProviderProfile.objects.get(name="stub-openai")
    models = list(profile.models.order_by("pk"))
    form = {
        "name": profile.name,
        "kind": profile.kind,
        "base_url": profile.base_url,
        "api_key_env": "",
        "allows_platform": "on",
        "enabled": "on",
        "timeout_s": "5",
        "stream_idle_timeout_s": "2",
        "platform_key": "",
        "key_strategy": profile.key_strategy,
        "platform_keys-TOTAL_FORMS": "0",
        "platform_keys-INITIAL_FORMS": "0",
        "models-TOTAL_FORMS": str(len(models) + 1),
        "models-INITIAL_FORMS": str(len(models)),
        "models-MIN_NUM_FORMS": "0",
        "models-MAX_NUM_FORMS": "1000",
    }
    for index, model in enumerate([*models, None]):
        prefix = f"models-{index}-"
        form.update(
            {
                prefix + "id": str(model.pk) if model else "",
                prefix + "profile": str(profile.pk),
                prefix + "name": model.name if model else "admin-model",
                prefix + "kind": model.kind if model else "chat",
                prefix + "upstream": model.upstream if model else "admin-upstream",
                # Prices are typed in dollars per million tokens.
                prefix + "input_micro_per_mtok": typed_dollars(
                    model.input_micro_per_mtok if model else 1
                ),
                prefix + "output_micro_per_mtok": typed_dollars(
                    model.output_micro_per_mtok if model else 1
                ),
                prefix + "max_output_tokens": str(model.max_output_tokens if model else 4096),
                prefix + "cache_max_ttl_s": str(model.cache_max_ttl_s if model else 86_400),
                prefix + "cache_hit_price_pct": str(model.cache_hit_price_pct if model else 10),
            }
        )

    saved = admin.post(f"/django-admin/providers/providerprofile/{profile.pk}/change/", form)

    assert saved.status_code == 302, saved.content.decode()[:2000]
    for gateway in replicas:
        wait_until(
            lambda gw=gateway: "admin-model" in models_of(gw, tenant),
            timeout_s=5,
            what=f"the admin's change to reach {gateway.url}",
        )
    served = [answer(gw, tenant, "admin-model") for gw in replicas]
    assert [r.status_code for r in served] == [200, 200]
    # The platform key was left empty in the form: the sealed one is kept.
    assert [(c["model"], c["key"]) for c in fleet.stub.vendor_calls()] == [
        ("admin-upstream", PLATFORM_KEY)
    ] * 2


@pytest.fixture(scope="module")
def busless_gateway(module_gateways):
    return module_gateways(REDIS_URL="", TOLLGATE_CONFIG_RELOAD_S="1", STUB_LIVE_KEY=LIVE_KEY)


def test_periodic_reload_picks_up_a_change_no_bus_announced(
    transactional_db, busless_gateway, stub
):
    from providers.models import ProviderModel, ProviderProfile

    stack = own_stack(busless_gateway, stub, stub_profiles(stub.url))
    tenant = stack.tenant()
    assert "quiet-model" not in models_of(busless_gateway, tenant)

    # Written straight to the database: nothing is published.
    ProviderModel.objects.create(
        profile=ProviderProfile.objects.get(name="stub-openai"),
        name="quiet-model",
        upstream="quiet-upstream",
    )

    wait_until(
        lambda: "quiet-model" in models_of(busless_gateway, tenant),
        timeout_s=5,
        what="the periodic reload",
    )
    assert answer(busless_gateway, tenant, "quiet-model").status_code == 200
    assert [c["model"] for c in stub.vendor_calls()] == ["quiet-upstream"]
