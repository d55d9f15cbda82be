"""The tenant API's members: the dashboard's rules (owners change members, everyone reads,
the last owner stays), the invitation link shown once, audited, scoped to the caller."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import Membership
from accounts.tokens import tenant_token_create
from audit.models import AuditEntry
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


def member_client(tenant, role: str) -> tuple[APIClient, Membership]:
    user = get_user_model().objects.create_user(username=f"{role}-{tenant.account_id}")
    seat = Membership.objects.create(account_id=tenant.account_id, user=user, role=role)
    _, secret = tenant_token_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client, seat


def owner_seat(tenant) -> Membership:
    return Membership.objects.get(account_id=tenant.account_id, role=Membership.Role.OWNER)


def test_an_owner_invites_with_a_one_time_link_that_sets_a_password_once():
    tenant = make_tenant()
    client = client_for(tenant)

    invited = client.post(
        "/api/members",
        {"username": "dana", "email": "d@example.com", "role": "admin"},
        format="json",
    )

    assert invited.status_code == 201
    body = invited.json()
    assert (body["username"], body["email"], body["role"]) == ("dana", "d@example.com", "admin")
    assert body["account"] == tenant.account_id
    link = body["link"]
    assert link.startswith("http://testserver/set-password/")
    listed = client.get("/api/members").json()["results"]
    assert [(m["username"], m["role"]) for m in listed] == [
        (f"{owner_seat(tenant).user.username}", "owner"),
        ("dana", "admin"),
    ]
    assert all("link" not in m for m in listed)
    browser = Client()
    path = link.removeprefix("http://testserver")
    form = browser.get(path, follow=True)
    assert form.status_code == 200
    done = browser.post(
        form.redirect_chain[-1][0] if form.redirect_chain else path,
        {"new_password1": "a long pass phrase 42", "new_password2": "a long pass phrase 42"},
    )
    assert done.status_code == 302
    assert get_user_model().objects.get(username="dana").check_password("a long pass phrase 42")
    assert Client().get(path, follow=True).context["validlink"] is False
    entry = AuditEntry.objects.filter(account_id=tenant.account_id, action="member.add").last()
    assert (entry.target_label, entry.after) == ("dana", {"user": "dana", "role": "admin"})


def test_a_taken_username_is_409_and_invites_nobody():
    tenant = make_tenant()
    taken = owner_seat(tenant).user.username.upper()

    response = client_for(tenant).post("/api/members", {"username": taken}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "LM-2009"
    assert Membership.objects.filter(account_id=tenant.account_id).count() == 1


def test_an_owner_changes_a_role_and_removes_a_member():
    tenant = make_tenant()
    client = client_for(tenant)
    _, seat = member_client(tenant, Membership.Role.VIEWER)

    changed = client.patch(f"/api/members/{seat.pk}", {"role": "admin"}, format="json")

    assert changed.status_code == 200 and changed.json()["role"] == "admin"
    assert Membership.objects.get(pk=seat.pk).role == "admin"
    removed = client.delete(f"/api/members/{seat.pk}")
    assert removed.status_code == 204 and removed.content == b""
    assert not Membership.objects.filter(pk=seat.pk).exists()
    actions = list(
        AuditEntry.objects.filter(account_id=tenant.account_id, target_type="member")
        .order_by("seq")
        .values_list("action", flat=True)
    )
    assert actions[-2:] == ["member.role", "member.remove"]


def test_the_last_owner_stays_409_in_our_error_language():
    tenant = make_tenant()
    client = client_for(tenant)
    seat = owner_seat(tenant)

    demoted = client.patch(f"/api/members/{seat.pk}", {"role": "viewer"}, format="json")
    removed = client.delete(f"/api/members/{seat.pk}")

    for response in (demoted, removed):
        assert response.status_code == 409
        assert response.json()["error"] == {
            "message": "An account keeps at least one owner.",
            "type": "conflict_error",
            "code": "LM-2009",
        }
    assert Membership.objects.get(pk=seat.pk).role == "owner"


@pytest.mark.parametrize("role", [Membership.Role.ADMIN, Membership.Role.VIEWER])
def test_admins_and_viewers_read_members_but_change_none_as_on_the_dashboard(role):
    tenant = make_tenant()
    client, _ = member_client(tenant, role)
    seat = owner_seat(tenant)

    assert len(client.get("/api/members").json()["results"]) == 2
    refused = [
        client.post("/api/members", {"username": "x", "role": "owner"}, format="json"),
        client.patch(f"/api/members/{seat.pk}", {"role": "viewer"}, format="json"),
        client.delete(f"/api/members/{seat.pk}"),
    ]
    assert [r.status_code for r in refused] == [403, 403, 403]
    assert {r.json()["error"]["code"] for r in refused} == {"LM-1003"}
    assert Membership.objects.filter(account_id=tenant.account_id).count() == 2


def test_another_accounts_members_are_404():
    mine, theirs = make_tenant(), make_tenant()
    client = client_for(mine)
    their_seat = owner_seat(theirs)

    assert client.get(f"/api/members?account={theirs.account_id}").status_code == 404
    assert client.patch(f"/api/members/{their_seat.pk}", {"role": "viewer"}).status_code == 404
    assert client.delete(f"/api/members/{their_seat.pk}").status_code == 404
    invite = client.post("/api/members", {"account": theirs.account_id, "username": "y"})
    assert invite.status_code == 404
    assert Membership.objects.filter(account_id=theirs.account_id).count() == 1


def test_a_bad_role_is_400_naming_the_field():
    tenant = make_tenant()
    response = client_for(tenant).post(
        "/api/members", {"username": "eve", "role": "root"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("role:")
