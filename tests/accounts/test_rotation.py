"""The rotation rule (accounts/rotation.py): a new secret for the same row, the old one kept
for a grace period from none to 7 days, one previous secret at most, every step audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import rotation
from accounts.models import ApiKey, TenantToken
from accounts.secrets import hash_secret
from audit.models import AuditEntry
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


def lookup(secret: str, *, now=None) -> ApiKey | None:
    return ApiKey.objects.filter(
        rotation.matching("key_hash", hash_secret(secret), now=now)
    ).first()


def test_rotation_keeps_the_key_and_both_secrets_match_until_the_grace_ends():
    tenant = make_tenant()
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    before = timezone.now()

    done = rotation.api_key_rotate(api_key=api_key, grace_s=3600)

    assert done.secret != tenant.api_key
    assert api_key.key_hash == hash_secret(done.secret)
    assert api_key.prefix == done.secret[:9]
    assert api_key.previous_hash == hash_secret(tenant.api_key)
    assert before + timedelta(seconds=3600) <= done.previous_valid_until
    assert done.previous_valid_until <= timezone.now() + timedelta(seconds=3600)
    assert lookup(done.secret).pk == tenant.api_key_id
    assert lookup(tenant.api_key).pk == tenant.api_key_id
    after_grace = done.previous_valid_until + timedelta(microseconds=1)
    assert lookup(tenant.api_key, now=after_grace) is None
    assert lookup(done.secret, now=after_grace).pk == tenant.api_key_id


def test_grace_zero_refuses_the_old_secret_at_once():
    tenant = make_tenant()
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)

    done = rotation.api_key_rotate(api_key=api_key, grace_s=0)

    assert done.previous_valid_until is None
    assert done.dropped_hashes == (hash_secret(tenant.api_key),)
    assert lookup(tenant.api_key) is None
    stored = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (stored.previous_hash, stored.previous_valid_until) == (None, None)


def test_rotating_again_in_grace_ends_the_older_secret_now():
    tenant = make_tenant()
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    first = rotation.api_key_rotate(api_key=api_key, grace_s=3600)

    second = rotation.api_key_rotate(api_key=api_key, grace_s=60)

    assert second.dropped_hashes == (hash_secret(tenant.api_key),)
    assert lookup(tenant.api_key) is None
    assert lookup(first.secret).pk == tenant.api_key_id
    assert lookup(second.secret).pk == tenant.api_key_id


@pytest.mark.parametrize("grace_s", [-1, rotation.GRACE_MAX_S + 1, 1.5, "60", True, None])
def test_a_grace_outside_none_to_7_days_is_refused_and_changes_nothing(grace_s):
    tenant = make_tenant()
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)

    with pytest.raises(rotation.BadGrace):
        rotation.api_key_rotate(api_key=api_key, grace_s=grace_s)

    assert ApiKey.objects.get(pk=tenant.api_key_id).key_hash == hash_secret(tenant.api_key)
    assert not AuditEntry.objects.filter(action="key.rotate").exists()


def test_seven_days_is_allowed():
    tenant = make_tenant()
    done = rotation.api_key_rotate(
        api_key=ApiKey.objects.get(pk=tenant.api_key_id), grace_s=rotation.GRACE_MAX_S
    )
    assert done.previous_valid_until is not None


def test_a_revoked_key_is_not_rotated():
    tenant = make_tenant()
    ApiKey.objects.filter(pk=tenant.api_key_id).update(revoked_at=timezone.now())
    with pytest.raises(rotation.NotRotatable):
        rotation.api_key_rotate(api_key=ApiKey.objects.get(pk=tenant.api_key_id), grace_s=60)


def test_the_trail_records_the_rotation_by_prefix_never_a_secret_or_hash():
    tenant = make_tenant()
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    old_prefix = api_key.prefix

    done = rotation.api_key_rotate(api_key=api_key, grace_s=60)

    entry = AuditEntry.objects.get(action="key.rotate")
    assert (entry.account_id, entry.target_type, entry.target_id) == (
        tenant.account_id,
        "key",
        str(tenant.api_key_id),
    )
    assert entry.before == {"prefix": old_prefix, "previous_valid_until": None}
    assert entry.after["prefix"] == api_key.prefix
    assert entry.after["grace_s"] == 60
    text = str(entry.before) + str(entry.after)
    for secret in (done.secret, tenant.api_key):
        assert secret not in text and hash_secret(secret) not in text


def test_a_tenant_token_rotates_the_same_way():
    tenant = make_tenant()
    token = TenantToken.objects.get(token_hash=hash_secret(tenant.api_token))

    done = rotation.tenant_token_rotate(token=token, grace_s=0)

    assert token.token_hash == hash_secret(done.secret)
    assert not TenantToken.objects.filter(
        rotation.matching("token_hash", hash_secret(tenant.api_token))
    ).exists()
    assert AuditEntry.objects.filter(action="token.rotate", target_id=str(token.pk)).count() == 1
