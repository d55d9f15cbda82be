"""SCIM 2.0 at /scim/v2/ in-process: filters, pages, the PATCH forms Okta and Entra ID send,
roles from groups (the last owner stays), SCIM's error schema, scoping to the token's
account."""

from __future__ import annotations

import pytest

from accounts.models import Account, Membership
from audit.models import AuditEntry
from tests.scim.support import SCIM_JSON, directory
from tests.support.services import delete_redis_keys

pytestmark = pytest.mark.django_db
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


def test_filters_find_users_by_username_without_case_and_by_external_id():
    d = directory()
    ada = d.create_user("ada@example.com", externalId="okta-00u1")
    d.create_user("bob@example.com")

    by_name = d.get("/Users", filter='userName eq "ADA@example.com"')
    by_external = d.get("/Users", filter='externalId eq "okta-00u1"')

    assert by_name["Content-Type"] == SCIM_JSON
    for found in (by_name.json(), by_external.json()):
        assert (found["totalResults"], [u["id"] for u in found["Resources"]]) == (1, [ada["id"]])
    none = d.get("/Users", filter='userName eq "nobody"').json()
    assert (none["totalResults"], none["Resources"]) == (0, [])
    refused = d.get("/Users", filter='title co "x"')
    assert refused.status_code == 400
    assert refused.json() == {
        "schemas": [ERROR],
        "status": "400",
        "scimType": "invalidFilter",
        "detail": """Only 'attribute eq value' filters are supported: 'title co "x"'.""",
    }


def test_groups_are_found_by_display_name_and_users_paged():
    d = directory()
    made = [d.create_user(f"u{i}@example.com")["id"] for i in range(5)]
    group = d.create_group("Eng Leads", made[0])

    found = d.get("/Groups", filter='displayName eq "eng leads"').json()
    assert [g["id"] for g in found["Resources"]] == [group["id"]]
    page = d.get("/Users", startIndex=3, count=2).json()
    # The tenant's owner is a member too: six users, in id order.
    assert (page["totalResults"], page["startIndex"], page["itemsPerPage"]) == (6, 3, 2)
    assert [u["id"] for u in page["Resources"]] == made[1:3]
    assert d.get("/Users", startIndex=6, count=5).json()["itemsPerPage"] == 1
    assert d.get("/Users", count=0).json()["Resources"] == []


def test_okta_and_entra_patch_forms_deactivate_rename_and_reactivate():
    d = directory()
    user = d.create_user(
        "ada@example.com", name={"givenName": "Ada"}, emails=[{"value": "a@x.com", "type": "work"}]
    )
    path = f"/Users/{user['id']}"
    account = d.account

    okta = d.patch(path, {"op": "replace", "value": {"active": False}})
    assert okta.json()["active"] is False
    assert not Membership.objects.filter(account=account, user_id=int(user["id"])).exists()
    entra = d.patch(
        path,
        {"op": "Replace", "path": "active", "value": "True"},
        {"op": "replace", "path": "name.familyName", "value": "Lovelace"},
        {"op": "replace", "path": 'emails[type eq "work"].value', "value": "ada@x.com"},
        {
            "op": "Add",
            "path": "urn:ietf:params:scim:schemas:core:2.0:User:displayName",
            "value": "A",
        },
    )
    body = entra.json()
    assert entra.status_code == 200 and body["active"] is True
    assert body["name"] == {"givenName": "Ada", "familyName": "Lovelace"}
    assert body["emails"] == [{"value": "ada@x.com", "type": "work"}]
    assert body["displayName"] == "A"
    seat = Membership.objects.get(account=account, user_id=int(user["id"]))
    assert seat.role == "viewer" and seat.user.email == "ada@x.com"
    assert seat.user.last_name == "Lovelace"
    actions = AuditEntry.objects.filter(account_id=account.pk, target_type="scim_user")
    assert list(actions.order_by("seq").values_list("action", flat=True)) == [
        "scim.user.create",
        "scim.user.update",
        "scim.user.deactivate",
        "scim.user.update",
        "scim.user.activate",
    ]


def test_group_membership_sets_the_role_and_never_demotes_the_last_owner():
    d = directory()
    account = d.account
    account.directory_roles = {"eng-leads": "admin", "owners": "owner"}
    account.save()
    ada = d.create_user("ada@example.com")
    group = d.create_group("eng-leads")
    path = f"/Groups/{group['id']}"

    def role() -> str:
        return Membership.objects.get(account=account, user_id=int(ada["id"])).role

    d.patch(path, {"op": "Add", "path": "members", "value": [{"value": ada["id"]}]})
    assert role() == "admin"
    d.patch(path, {"op": "replace", "value": {"displayName": "owners"}})
    assert role() == "owner"
    d.patch(path, {"op": "remove", "path": f'members[value eq "{ada["id"]}"]'})
    assert role() == "viewer"
    assert d.get(f"/Users/{ada['id']}").json().get("groups") is None

    # The tenant's own owner, the last one, put in a group mapped to nothing: refused whole.
    d.patch(path, {"op": "replace", "path": "displayName", "value": "contractors"})
    owner = Membership.objects.get(account=account, role="owner")
    refused = d.patch(
        path, {"op": "add", "path": "members", "value": [{"value": str(owner.user_id)}]}
    )
    assert refused.status_code == 400
    assert refused.json()["scimType"] == "mutability"
    assert refused.json()["detail"] == "An account keeps at least one owner. The change is refused."
    assert Membership.objects.get(pk=owner.pk).role == "owner"
    assert d.get(path).json().get("members") is None
    deactivate = d.patch(
        f"/Users/{owner.user_id}", {"op": "replace", "path": "active", "value": False}
    )
    assert deactivate.status_code == 400
    assert Membership.objects.filter(pk=owner.pk).exists()


def test_entra_removes_members_named_in_the_value_and_a_deleted_group_takes_its_role():
    d = directory()
    account = d.account
    account.directory_roles = {"admins": "admin"}
    account.save()
    ada, bob = d.create_user("ada@example.com"), d.create_user("bob@example.com")
    group = d.create_group("admins", ada["id"], bob["id"])

    d.patch(
        f"/Groups/{group['id']}",
        {"op": "Remove", "path": "members", "value": [{"value": bob["id"]}]},
    )

    roles = dict(Membership.objects.filter(account=account).values_list("user__username", "role"))
    assert (roles["ada@example.com"], roles["bob@example.com"]) == ("admin", "viewer")
    assert d.delete(f"/Groups/{group['id']}").status_code == 204
    assert Membership.objects.get(account=account, user_id=int(ada["id"])).role == "viewer"
    assert d.get(f"/Groups/{group['id']}").status_code == 404


def test_a_taken_username_is_409_uniqueness_and_a_bad_body_400():
    d = directory()
    d.create_user("ada@example.com")
    taken = d.post("/Users", {"userName": "ADA@example.com"})
    assert (taken.status_code, taken.json()["scimType"]) == (409, "uniqueness")
    bad = d.post("/Users", {"userName": "has space"})
    assert (bad.status_code, bad.json()["scimType"]) == (400, "invalidValue")
    garbage = d.client.post("/scim/v2/Users", "{", content_type=SCIM_JSON)
    assert (garbage.status_code, garbage.json()["scimType"]) == (400, "invalidSyntax")


def test_another_accounts_users_and_groups_are_404():
    mine, theirs = directory(), directory()
    user = theirs.create_user("ada@example.com")
    group = theirs.create_group("eng")

    assert mine.get(f"/Users/{user['id']}").status_code == 404
    assert mine.get(f"/Groups/{group['id']}").status_code == 404
    assert mine.delete(f"/Users/{user['id']}").status_code == 404
    refused = mine.post("/Groups", {"displayName": "x", "members": [{"value": user["id"]}]})
    assert refused.status_code == 400
    assert mine.get("/Groups").json()["totalResults"] == 0


def test_a_wrong_token_is_401_in_scims_format_and_too_many_are_throttled():
    delete_redis_keys("tollgate:login:*")
    d = directory()
    d.client.defaults["HTTP_AUTHORIZATION"] = "Bearer tgs_wrong"

    answers = [d.get("/Users") for _ in range(6)]

    assert [a.status_code for a in answers] == [401, 401, 401, 401, 429, 429]
    assert answers[0].json() == {
        "schemas": [ERROR],
        "status": "401",
        "detail": "Unknown or replaced SCIM token.",
    }
    assert answers[0]["Content-Type"] == SCIM_JSON
    assert int(answers[4]["Retry-After"]) >= 1
    delete_redis_keys("tollgate:login:*")
    d.client.defaults.pop("HTTP_AUTHORIZATION")
    assert d.get("/Users").status_code == 401
    # Discovery is public: it says nothing of any account.
    assert d.get("/ServiceProviderConfig").json()["patch"] == {"supported": True}


def test_delete_removes_the_user_and_its_group_places():
    d = directory()
    ada = d.create_user("ada@example.com")
    group = d.create_group("eng", ada["id"])

    assert d.delete(f"/Users/{ada['id']}").status_code == 204

    assert d.get(f"/Users/{ada['id']}").status_code == 404
    assert d.get(f"/Groups/{group['id']}").json().get("members") is None
    assert Account.objects.get(pk=d.tenant.account_id).memberships.count() == 1


def test_a_person_of_another_account_too_keeps_their_name_and_email():
    d, other = directory(), directory()
    ada = d.create_user("ada@example.com", emails=[{"value": "ada@example.com"}])
    person = Membership.objects.get(account=d.account, user_id=int(ada["id"])).user
    Membership.objects.create(account=other.account, user=person, role="viewer")
    path = f"/Users/{ada['id']}"

    renamed = d.patch(path, {"op": "replace", "path": "userName", "value": "eve@example.com"})
    emailed = d.patch(path, {"op": "replace", "path": "emails", "value": [{"value": "e@x.com"}]})

    assert (renamed.status_code, renamed.json()["scimType"]) == (400, "mutability")
    assert emailed.status_code == 200  # kept on the directory's record of them
    assert emailed.json()["emails"] == [{"value": "e@x.com"}]
    person.refresh_from_db()
    assert (person.username, person.email) == ("ada@example.com", "ada@example.com")


def test_attributes_outside_the_schema_are_accepted_and_not_kept_read_only_ones_refused():
    d = directory()
    enterprise = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
    created = d.post(
        "/Users",
        {"userName": "ada@example.com", "title": "Engineer", enterprise: {"department": "R&D"}},
    )
    path = f"/Users/{created.json()['id']}"

    entra = d.patch(
        path,
        {"op": "Add", "path": "title", "value": "Lead"},
        {"op": "Add", "path": f"{enterprise}:employeeNumber", "value": "42"},
        {"op": "Replace", "path": 'phoneNumbers[type eq "work"].value', "value": "555"},
        {"op": "replace", "value": {"displayName": "Ada", enterprise: {"department": "Ops"}}},
    )
    read_only = d.patch(path, {"op": "add", "path": "groups", "value": [{"value": "1"}]})

    assert created.status_code == 201 and "title" not in created.json()
    assert entra.status_code == 200
    assert {k for k in entra.json() if k not in ("schemas", "id", "meta")} == {
        "userName",
        "displayName",
        "active",
    }
    assert (read_only.status_code, read_only.json()["scimType"]) == (400, "mutability")


def test_a_member_an_owner_removed_reads_inactive_until_the_directory_says_active():
    d = directory()
    ada = d.create_user("ada@example.com")
    path = f"/Users/{ada['id']}"
    Membership.objects.get(account=d.account, user_id=int(ada["id"])).delete()

    assert d.get(path).json()["active"] is False
    renamed = d.patch(path, {"op": "replace", "path": "displayName", "value": "Ada"})
    assert renamed.json()["active"] is False
    assert not Membership.objects.filter(account=d.account, user_id=int(ada["id"])).exists()
    d.patch(path, {"op": "replace", "path": "active", "value": True})
    assert Membership.objects.filter(account=d.account, user_id=int(ada["id"])).exists()
