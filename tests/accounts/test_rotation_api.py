"""The tenant API's rotations: POST /api/keys/{id}/rotate and /api/tokens/{id}/rotate answer
the new secret once; the old one works through its grace; bad input is our error body."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from accounts.models import ApiKey, Membership, TenantToken
from accounts.secrets import hash_secret
from audit.models import AuditEntry
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


def client_with(token: str) -> APIClient:
    # An address of its own (a random /64 of the documentation range): the old tokens this
    # file sends after their grace are failures the tenant-token throttle counts per address.
    client = APIClient(REMOTE_ADDR=f"2001:db8:{secrets.randbits(16):x}:{secrets.randbits(16):x}::1")
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_rotating_a_key_answers_the_new_secret_and_its_old_ones_grace_end():
    tenant = make_tenant()
    client = client_with(tenant.api_token)
    asked_at = timezone.now()

    answer = client.post(f"/api/keys/{tenant.api_key_id}/rotate", {"grace_s": 3600}, "json")

    assert answer.status_code == 200
    body = answer.json()
    assert body["id"] == tenant.api_key_id
    stored = ApiKey.objects.get(pk=tenant.api_key_id)
    assert stored.key_hash == hash_secret(body["secret"])
    assert stored.previous_hash == hash_secret(tenant.api_key)
    assert body["prefix"] == body["secret"][:9] == stored.prefix
    until = parse_datetime(body["previous_valid_until"])
    assert asked_at + timedelta(seconds=3600) <= until <= timezone.now() + timedelta(hours=1)
    assert "secret" not in client.get(f"/api/keys/{tenant.api_key_id}").json()
    entry = AuditEntry.objects.get(action="key.rotate")
    assert entry.actor_kind == "token"


@pytest.mark.parametrize(
    "body",
    [{}, {"grace_s": -1}, {"grace_s": 604801}, {"grace_s": "60"}, {"grace_s": 1.5}],
    ids=["missing", "negative", "over-7-days", "string", "fraction"],
)
def test_a_bad_grace_is_lm_2001_naming_the_range_and_changes_nothing(body):
    tenant = make_tenant()

    answer = client_with(tenant.api_token).post(
        f"/api/keys/{tenant.api_key_id}/rotate", body, "json"
    )

    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "LM-2001"
    assert error["type"] == "invalid_request_error"
    if body:
        assert error["message"] == (
            "grace_s: Give grace_s in whole seconds from 0 (none) to 604800 (7 days)."
        )
    else:
        assert error["message"] == "grace_s: This field is required."
    assert ApiKey.objects.get(pk=tenant.api_key_id).key_hash == hash_secret(tenant.api_key)


def test_another_accounts_key_is_404_and_a_viewer_is_403():
    mine, theirs = make_tenant(), make_tenant()
    client = client_with(mine.api_token)
    assert client.post(f"/api/keys/{theirs.api_key_id}/rotate", {"grace_s": 0}, "json").json()[
        "error"
    ]["code"] == ("LM-2004")

    Membership.objects.filter(account_id=mine.account_id).update(role="viewer")
    refused = client.post(f"/api/keys/{mine.api_key_id}/rotate", {"grace_s": 0}, "json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "LM-1003")
    assert ApiKey.objects.get(pk=mine.api_key_id).key_hash == hash_secret(mine.api_key)


def test_a_revoked_key_is_a_conflict():
    tenant = make_tenant()
    client = client_with(tenant.api_token)
    client.post(f"/api/keys/{tenant.api_key_id}/revoke")

    answer = client.post(f"/api/keys/{tenant.api_key_id}/rotate", {"grace_s": 0}, "json")

    assert answer.status_code == 409
    assert answer.json()["error"] == {
        "message": "A revoked key cannot be rotated.",
        "type": "conflict_error",
        "code": "LM-2009",
    }


def test_a_rotated_token_works_with_both_secrets_through_grace_then_only_the_new():
    tenant = make_tenant()
    old = client_with(tenant.api_token)
    listed = old.get("/api/tokens").json()["results"]
    assert [(t["current"], t["previous_valid_until"]) for t in listed] == [(True, None)]
    token_id = listed[0]["id"]

    rotated = old.post(f"/api/tokens/{token_id}/rotate", {"grace_s": 60}, "json").json()

    new = client_with(rotated["secret"])
    assert rotated["id"] == token_id and rotated["prefix"] == rotated["secret"][:10]
    assert new.get("/api/account").status_code == 200
    assert old.get("/api/account").status_code == 200  # in grace
    assert AuditEntry.objects.filter(action="token.rotate").count() == 1
    # The grace ends (moved to the past here): the old token is refused at once.
    TenantToken.objects.filter(pk=token_id).update(
        previous_valid_until=timezone.now() - timedelta(seconds=1)
    )
    refused = old.get("/api/account")
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "LM-1001")
    assert new.get("/api/account").status_code == 200


def test_a_token_rotated_with_no_grace_is_refused_at_once_and_others_tokens_are_404():
    tenant, other = make_tenant(), make_tenant()
    old = client_with(tenant.api_token)
    token_id = old.get("/api/tokens").json()["results"][0]["id"]
    other_id = client_with(other.api_token).get("/api/tokens").json()["results"][0]["id"]

    assert old.post(f"/api/tokens/{other_id}/rotate", {"grace_s": 0}, "json").status_code == 404
    rotated = old.post(f"/api/tokens/{token_id}/rotate", {"grace_s": 0}, "json").json()

    assert rotated["previous_valid_until"] is None
    assert old.get("/api/account").status_code == 401
    assert client_with(rotated["secret"]).get("/api/account").status_code == 200
