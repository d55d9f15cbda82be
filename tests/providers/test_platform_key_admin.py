"""Platform keys in the operator's admin: added sealed, put back after a vendor refused one,
each change on the audit trail without the secret; the catalog opens what was sealed."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from audit.models import AuditEntry
from gateway.catalog import load_catalog
from providers.models import PlatformKey, ProviderProfile
from tests.audit.helpers import form_fields
from tests.support.profiles import install_profiles

pytestmark = pytest.mark.django_db
SECRET = "sk-extra-platform-key-4321"


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_superuser("ops", "ops@example.invalid", "pw")
    client = Client()
    client.force_login(user)
    return client


def change_url(profile: ProviderProfile) -> str:
    return f"/django-admin/providers/providerprofile/{profile.pk}/change/"


def test_an_operator_adds_a_sealed_key_and_puts_a_failing_one_back(operator):
    install_profiles("http://127.0.0.1:9")
    profile = ProviderProfile.objects.get(name="stub-openai")
    fields = form_fields(operator.get(change_url(profile)).content.decode())
    assert fields["platform_keys-TOTAL_FORMS"] == "0"

    saved = operator.post(
        change_url(profile),
        {
            **fields,
            "key_strategy": "least_in_flight",
            "platform_keys-TOTAL_FORMS": "1",
            "platform_keys-0-label": "extra",
            "platform_keys-0-secret": SECRET,
            "platform_keys-0-weight": "2",
            "platform_keys-0-rpm": "500",
            "platform_keys-0-enabled": "on",
            "platform_keys-0-status": "active",
        },
    )

    assert saved.status_code == 302, saved.content.decode()[:2000]
    key = PlatformKey.objects.get(profile=profile)
    assert (key.label, key.last4, key.weight, key.rpm, key.tpm) == ("extra", "4321", 2, 500, None)
    assert SECRET.encode() not in bytes(key.sealed)
    added = AuditEntry.objects.get(action="platformkey.add")
    assert (added.actor_kind, added.target_label) == ("operator", "stub-openai/extra")
    assert added.after["last4"] == "4321"

    # The gateway's catalog opens it: the profile's own key, then this one.
    catalog = load_catalog(session=None, vendors=None)  # no call is made
    pool = catalog.profiles["stub-openai"].key_pool
    assert pool is not None and pool.strategy == "least_in_flight"
    assert [(k.label, k.secret, k.weight, k.rpm) for k in pool.keys][1:] == [
        ("extra", SECRET, 2, 500)
    ]

    # The vendor refused it: failing, out of the catalog until an operator puts it back.
    PlatformKey.objects.filter(pk=key.pk).update(status="failing")
    pool = (
        load_catalog(session=None, vendors=None).profiles["stub-openai"].key_pool
    )  # no call is made
    assert pool is not None and [k.label for k in pool.keys] == ["profile"]
    fields = form_fields(operator.get(change_url(profile)).content.decode())
    assert fields["platform_keys-0-status"] == "failing"
    assert "platform_keys-0-secret" in fields and fields["platform_keys-0-secret"] == ""
    saved = operator.post(change_url(profile), {**fields, "platform_keys-0-status": "active"})

    assert saved.status_code == 302, saved.content.decode()[:2000]
    key.refresh_from_db()
    assert key.status == "active" and key.last4 == "4321"  # the sealed secret kept
    update = AuditEntry.objects.get(action="platformkey.update")
    assert (update.before["status"], update.after["status"]) == ("failing", "active")

    # Removed: recorded by its id and label, before it is gone.
    fields = form_fields(operator.get(change_url(profile)).content.decode())
    saved = operator.post(change_url(profile), {**fields, "platform_keys-0-DELETE": "on"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert not PlatformKey.objects.exists()
    deleted = AuditEntry.objects.get(action="platformkey.delete")
    assert (deleted.target_id, deleted.target_label) == (str(key.pk), "stub-openai/extra")
    assert deleted.before["label"] == "extra" and not deleted.after

    trail = json.dumps([entry.as_record() for entry in AuditEntry.objects.all()])
    assert SECRET not in trail and SECRET[:-4] not in trail


def test_a_key_is_a_secret_or_a_variable_not_both(operator):
    install_profiles("http://127.0.0.1:9")
    profile = ProviderProfile.objects.get(name="stub-openai")
    fields = form_fields(operator.get(change_url(profile)).content.decode())
    row = {
        "platform_keys-TOTAL_FORMS": "1",
        "platform_keys-0-label": "both",
        "platform_keys-0-secret": SECRET,
        "platform_keys-0-api_key_env": "SOME_VAR",
        "platform_keys-0-weight": "1",
        "platform_keys-0-status": "active",
    }

    refused = operator.post(change_url(profile), {**fields, **row})
    reserved = operator.post(
        change_url(profile),
        {**fields, **row, "platform_keys-0-label": "profile", "platform_keys-0-api_key_env": ""},
    )

    assert refused.status_code == 200
    assert "not both" in refused.content.decode()
    assert reserved.status_code == 200
    assert "names the profile&#x27;s own key" in reserved.content.decode()
    assert not PlatformKey.objects.exists()
