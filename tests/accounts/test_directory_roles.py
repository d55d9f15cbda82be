"""An account's directory roles (directory group -> role), set by its owners through the
tenant API and the dashboard, and by operators in the admin: recorded, and the members the
directory provisioned take their new roles at once (the last owner stays owner)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Account, Membership
from audit.models import AuditEntry
from tests.accounts.test_members_api import client_for, member_client, owner_seat
from tests.audit.helpers import form_fields
from tests.scim.support import directory
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


def role_of(account_id: int, username: str) -> str:
    return Membership.objects.get(account_id=account_id, user__username=username).role


def test_an_owner_maps_groups_and_provisioned_members_take_their_roles_at_once():
    scim = directory()
    tenant = scim.tenant
    ada = scim.create_user("ada@acme.test")
    scim.create_group("eng-leads", ada["id"])
    assert role_of(tenant.account_id, "ada@acme.test") == "viewer"  # nothing mapped yet

    answer = client_for(tenant).put(
        "/api/directory-roles", {"roles": {"eng-leads": "admin", "eng": "viewer"}}, format="json"
    )

    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "account": tenant.account_id,
        "roles": {"eng-leads": "admin", "eng": "viewer"},
    }
    assert role_of(tenant.account_id, "ada@acme.test") == "admin"
    assert client_for(tenant).get("/api/directory-roles").json()["roles"] == {
        "eng-leads": "admin",
        "eng": "viewer",
    }
    entry = AuditEntry.objects.get(action="account.directory")
    assert (entry.account_id, entry.before, entry.after) == (
        tenant.account_id,
        {"directory_roles": {}},
        {"directory_roles": {"eng-leads": "admin", "eng": "viewer"}},
    )
    role_entry = AuditEntry.objects.get(action="member.role")
    assert (role_entry.target_label, role_entry.after) == ("ada@acme.test", {"role": "admin"})


def test_only_owners_change_the_map_and_a_bad_one_is_refused_whole():
    tenant = make_tenant()
    viewer, _ = member_client(tenant, "viewer")

    refused = viewer.put("/api/directory-roles", {"roles": {"eng": "admin"}}, format="json")
    bad_role = client_for(tenant).put(
        "/api/directory-roles", {"roles": {"eng": "root"}}, format="json"
    )
    long_name = client_for(tenant).put(
        "/api/directory-roles", {"roles": {"x" * 201: "viewer"}}, format="json"
    )

    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "LM-1003")
    assert (bad_role.status_code, bad_role.json()["error"]["code"]) == (400, "LM-2001")
    assert (long_name.status_code, long_name.json()["error"]["code"]) == (400, "LM-2001")
    assert Account.objects.get(pk=tenant.account_id).directory_roles == {}
    assert viewer.get("/api/directory-roles").json()["roles"] == {}  # every member reads
    assert not AuditEntry.objects.filter(action="account.directory").exists()


def test_a_map_that_would_demote_the_last_owner_leaves_them_owner():
    scim = directory()
    tenant = scim.tenant
    owner = owner_seat(tenant)
    boss = scim.create_user("boss@acme.test")
    scim.create_group("founders", boss["id"])
    client_for(tenant).put("/api/directory-roles", {"roles": {"founders": "owner"}}, format="json")
    assert role_of(tenant.account_id, "boss@acme.test") == "owner"
    owner.delete()  # the provisioned founder is now the only owner

    answer = client_for_user_of(tenant.account_id, "boss@acme.test").put(
        "/api/directory-roles", {"roles": {"founders": "viewer"}}, format="json"
    )

    assert answer.status_code == 200
    assert role_of(tenant.account_id, "boss@acme.test") == "owner"


def client_for_user_of(account_id: int, username: str):
    from rest_framework.test import APIClient

    from accounts.tokens import tenant_token_create

    _, secret = tenant_token_create(user=get_user_model().objects.get(username=username))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_the_dashboard_form_saves_the_map_and_says_which_line_is_wrong():
    scim = directory()
    tenant = scim.tenant
    ada = scim.create_user("ada@acme.test")
    scim.create_group("eng", ada["id"])
    owner = owner_seat(tenant).user
    browser = Client()
    browser.force_login(owner)
    url = f"/dashboard/{tenant.account_id}/members/directory-roles/"

    wrong = browser.post(url, {"roles": "eng = admin\njust-a-name"})
    saved = browser.post(url, {"roles": "eng = admin\n\n ops = viewer "})
    page = browser.get(f"/dashboard/{tenant.account_id}/members/")

    assert wrong.status_code == 200
    assert "Line 2 is not &#x27;group = role&#x27;." in wrong.content.decode()
    assert saved.status_code == 302
    assert Account.objects.get(pk=tenant.account_id).directory_roles == {
        "eng": "admin",
        "ops": "viewer",
    }
    assert role_of(tenant.account_id, "ada@acme.test") == "admin"
    assert "eng = admin\nops = viewer</textarea>" in page.content.decode()


def test_a_viewer_neither_sees_nor_posts_the_form():
    tenant = make_tenant()
    user = get_user_model().objects.create_user(username="vera")
    Membership.objects.create(account_id=tenant.account_id, user=user, role="viewer")
    browser = Client()
    browser.force_login(user)

    page = browser.get(f"/dashboard/{tenant.account_id}/members/")
    posted = browser.post(
        f"/dashboard/{tenant.account_id}/members/directory-roles/", {"roles": "eng = owner"}
    )

    assert 'id="directory-form"' not in page.content.decode()
    assert posted.status_code == 403
    assert Account.objects.get(pk=tenant.account_id).directory_roles == {}


def test_an_operator_changes_the_map_in_the_admin_recorded_and_followed():
    scim = directory()
    tenant = scim.tenant
    ada = scim.create_user("ada@acme.test")
    scim.create_group("eng", ada["id"])
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("ops", "o@example.invalid"))
    url = f"/django-admin/accounts/account/{tenant.account_id}/change/"
    fields = form_fields(operator.get(url).content.decode())

    saved = operator.post(url, {**fields, "directory_roles": '{"eng": "admin"}'})

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert Account.objects.get(pk=tenant.account_id).directory_roles == {"eng": "admin"}
    assert role_of(tenant.account_id, "ada@acme.test") == "admin"
    entry = AuditEntry.objects.get(action="account.update")
    # The trail keeps what changed, key by key: "eng" was not mapped before.
    assert (entry.actor_kind, entry.before, entry.after) == (
        "operator",
        {"directory_roles": {"eng": None}},
        {"directory_roles": {"eng": "admin"}},
    )
