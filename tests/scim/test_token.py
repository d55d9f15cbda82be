"""The account's SCIM token: created and rotated by an owner in the dashboard and the tenant
API, shown once, stored hashed, the old one working through its grace; audited."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.secrets import hash_secret
from audit.models import AuditEntry
from scim.models import ScimToken
from tests.dashboard.test_pages import member, page, signed_in
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


def scim_status(secret: str) -> int:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/scim/v2/Users").status_code


def test_an_owner_creates_then_rotates_the_token_in_the_dashboard_shown_once():
    tenant = make_tenant()
    owner = signed_in(tenant)

    first = owner.post(page(tenant, "members/scim-token/"))
    secret = re.search(r'<code id="scim-token">(tgs_[^<]+)</code>', first.content.decode())[1]
    assert "http://testserver/scim/v2" in first.content.decode()
    stored = ScimToken.objects.get(account_id=tenant.account_id)
    assert stored.token_hash == hash_secret(secret) and secret not in str(stored.__dict__)
    assert scim_status(secret) == 200
    again = owner.get(page(tenant, "members/")).content.decode()
    assert secret not in again and f"{stored.prefix}…" in again

    rotated = owner.post(page(tenant, "members/scim-token/"), {"grace_s": "3600"})
    new = re.search(r'<code id="scim-token">(tgs_[^<]+)</code>', rotated.content.decode())[1]
    assert (scim_status(new), scim_status(secret)) == (200, 200)  # the old one in its grace
    assert "the previous one works until" in rotated.content.decode()
    owner.post(page(tenant, "members/scim-token/"), {"grace_s": "0"})
    assert (scim_status(new), scim_status(secret)) == (401, 401)
    actions = AuditEntry.objects.filter(account_id=tenant.account_id, target_type="scim_token")
    assert list(actions.order_by("seq").values_list("action", flat=True)) == [
        "scim.token.create",
        "scim.token.rotate",
        "scim.token.rotate",
    ]


def test_admins_and_viewers_may_not_touch_the_token_in_the_dashboard():
    tenant = make_tenant()
    for role in ("admin", "viewer"):
        client = member(tenant, role)
        assert client.post(page(tenant, "members/scim-token/")).status_code == 403
        assert "scim-token-form" not in client.get(page(tenant, "members/")).content.decode()
    assert not ScimToken.objects.exists()


def test_the_tenant_api_issues_the_token_once_to_owners_only():
    tenant = make_tenant()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")

    created = api.post("/api/scim-token", {}, format="json")

    assert created.status_code == 201
    body = created.json()
    assert body["token"].startswith("tgs_") and body["scim_url"] == "http://testserver/scim/v2"
    assert (body["account"], body["prefix"]) == (tenant.account_id, body["token"][:10])
    assert body["previous_valid_until"] is None
    rotated = api.post("/api/scim-token", {"grace_s": 60}, format="json").json()
    until = timezone.datetime.fromisoformat(rotated["previous_valid_until"])
    assert 59 <= (until - timezone.now()).total_seconds() <= 60
    assert (scim_status(rotated["token"]), scim_status(body["token"])) == (200, 200)
    too_long = api.post("/api/scim-token", {"grace_s": 604801}, format="json")
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "LM-2001"
    from accounts.models import Membership

    Membership.objects.filter(account_id=tenant.account_id).update(role="admin")
    refused = api.post("/api/scim-token", {}, format="json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "LM-1003")
