"""The tenant API: token auth, account scoping (404, never 403, for others), keys shown once."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.models import ApiKey, Membership
from accounts.secrets import hash_secret
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


def test_account_and_groups_are_the_callers_own():
    mine, theirs = make_tenant(), make_tenant()
    client = client_for(mine)

    assert [a["id"] for a in client.get("/api/account").json()["results"]] == [mine.account_id]
    assert [g["id"] for g in client.get("/api/groups").json()["results"]] == [mine.group_id]
    response = client.get(f"/api/groups/{theirs.group_id}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "LM-2004"


def test_create_key_shows_the_secret_once_and_stores_only_its_hash():
    tenant = make_tenant()
    client = client_for(tenant)

    created = client.post("/api/keys", {"group": tenant.group_id, "name": "ci"}, format="json")

    assert created.status_code == 201
    secret = created.json()["secret"]
    stored = ApiKey.objects.get(pk=created.json()["id"])
    assert stored.key_hash == hash_secret(secret)
    assert secret not in str(ApiKey.objects.filter(pk=stored.pk).values().get())
    listed = client.get("/api/keys").json()["results"]
    assert {k["id"] for k in listed} == {tenant.api_key_id, stored.pk}
    assert all("secret" not in k for k in listed)
    assert "secret" not in client.get(f"/api/keys/{stored.pk}").json()


def test_key_in_another_accounts_group_is_404():
    mine, theirs = make_tenant(), make_tenant()
    response = client_for(mine).post("/api/keys", {"group": theirs.group_id}, format="json")
    assert response.status_code == 404
    assert ApiKey.objects.filter(group_id=theirs.group_id).count() == 1


def test_revoke_sets_revoked_at_and_another_accounts_key_is_404():
    mine, theirs = make_tenant(), make_tenant()
    client = client_for(mine)

    assert client.post(f"/api/keys/{theirs.api_key_id}/revoke").status_code == 404
    assert ApiKey.objects.get(pk=theirs.api_key_id).revoked_at is None
    revoked = client.post(f"/api/keys/{mine.api_key_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None


def test_viewers_may_read_but_not_create_keys():
    tenant = make_tenant()
    Membership.objects.filter(account_id=tenant.account_id).update(role=Membership.Role.VIEWER)
    client = client_for(tenant)

    assert client.get("/api/keys").status_code == 200
    response = client.post("/api/keys", {"group": tenant.group_id}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "LM-1003"


@pytest.mark.parametrize("header", [None, "Token nope", "Bearer something"])
def test_without_a_valid_token_is_401_in_our_error_language(header):
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/groups")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "LM-1001"


def test_invalid_input_is_lm_2001():
    tenant = make_tenant()
    response = client_for(tenant).post("/api/groups", {"name": ""}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "LM-2001"
    assert response.json()["error"]["message"].startswith("name:")


def test_openapi_schema_is_served():
    tenant = make_tenant()
    response = client_for(tenant).get("/api/schema")
    assert response.status_code == 200
    assert b"/api/keys" in response.content
