"""Sealing: AES-GCM bound to the row, versioned master keys, a resumable re-seal."""

from __future__ import annotations

import base64
import os

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from byok.models import KeyPool, TeamKey
from byok.pools import load_pools
from byok.services import team_key_add
from core import sealing
from providers.models import ProviderProfile
from tests.support.tenants import make_tenant


def new_key(version: str) -> str:
    return f"{version}:" + base64.urlsafe_b64encode(os.urandom(32)).decode()


@pytest.fixture
def keyring_of(settings):
    def use(spec: str) -> None:
        settings.SEALING_KEYS = spec
        sealing.keyring.cache_clear()

    yield use
    sealing.keyring.cache_clear()


def test_a_sealed_key_opens_only_for_its_row(keyring_of):
    keyring_of(new_key("v1"))
    sealed, version = sealing.seal("sk-secret", bound_to="teamkey:1:openai:7")

    assert b"sk-secret" not in sealed
    assert sealing.unseal(sealed, version=version, bound_to="teamkey:1:openai:7") == "sk-secret"
    with pytest.raises(sealing.SealBroken):
        sealing.unseal(sealed, version=version, bound_to="teamkey:2:openai:7")
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(sealing.SealBroken):
        sealing.unseal(tampered, version=version, bound_to="teamkey:1:openai:7")


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "v1",
        "v1:",
        "v1:!!!",
        "v1:" + "A" * 10,
        "v1:"
        + base64.urlsafe_b64encode(b"x" * 32).decode()
        + ",v1:"
        + base64.urlsafe_b64encode(b"y" * 32).decode(),
    ],
)
def test_malformed_master_keys_are_refused_naming_the_variable(spec):
    with pytest.raises(ImproperlyConfigured, match="SEALING_KEYS"):
        sealing.parse_keyring(spec)


@pytest.mark.django_db
def test_a_ciphertext_copied_to_another_row_does_not_open(keyring_of):
    keyring_of(new_key("v1"))
    ProviderProfile.objects.create(name="stub-openai", kind="openai", base_url="http://x/v1")
    tenant = make_tenant()
    first = team_key_add(
        group=group_id_obj(tenant), provider="stub-openai", label="a", key="sk-aaaa"
    )
    second = team_key_add(
        group=group_id_obj(tenant), provider="stub-openai", label="b", key="sk-bbbb"
    )
    TeamKey.objects.filter(pk=second.pk).update(sealed=first.sealed)

    pool = load_pools()[(tenant.group_id, "stub-openai")]

    assert [(k.label, k.secret) for k in pool.keys] == [("a", "sk-aaaa")]


def group_id_obj(tenant):
    from accounts.models import Group

    return Group.objects.get(pk=tenant.group_id)


@pytest.mark.django_db
def test_rotation_reseals_every_key_under_the_newest_version_and_can_rerun(keyring_of):
    old = new_key("v1")
    keyring_of(old)
    ProviderProfile.objects.create(name="stub-openai", kind="openai", base_url="http://x/v1")
    tenant = make_tenant()
    for index in range(3):
        team_key_add(
            group=group_id_obj(tenant),
            provider="stub-openai",
            label=f"k{index}",
            key=f"sk-key-{index}",
        )
    newer = new_key("v2")
    keyring_of(f"{newer},{old}")
    # Both versions open while the rotation is under way.
    assert [k.secret for k in load_pools()[(tenant.group_id, "stub-openai")].keys] == [
        "sk-key-0",
        "sk-key-1",
        "sk-key-2",
    ]

    call_command("reseal_team_keys")
    call_command("reseal_team_keys")  # a re-run changes nothing

    assert set(TeamKey.objects.values_list("seal_version", flat=True)) == {"v2"}
    keyring_of(newer)  # the old master key retired: everything still opens
    assert [k.secret for k in load_pools()[(tenant.group_id, "stub-openai")].keys] == [
        "sk-key-0",
        "sk-key-1",
        "sk-key-2",
    ]
    assert KeyPool.objects.count() == 1
