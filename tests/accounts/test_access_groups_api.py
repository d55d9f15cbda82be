"""The tenant API's model access groups: CRUD scoped to the caller's account, assignment to
keys and groups through their PATCH, bounded entries, audited writes, and the compiled policy
the gateway loads (accounts.access_groups.policy_for_key)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.access_groups import policy_for_key
from accounts.model_access import Offering
from accounts.models import AccessGroup, ApiKey, Membership
from audit.models import AuditEntry
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


def create(client: APIClient, name: str, entries: list[str], **extra):
    return client.post(
        "/api/access-groups", {"name": name, "entries": entries, **extra}, format="json"
    )


def actions(account_id: int) -> list[str]:
    rows = AuditEntry.objects.filter(account_id=account_id, action__contains="access")
    return list(rows.order_by("seq").values_list("action", flat=True))


def test_an_access_group_is_created_listed_changed_and_deleted():
    tenant = make_tenant()
    client = client_for(tenant)

    created = create(client, "cheap", ["gpt-4o-mini", "claude-3-5-haiku"], description="low")
    assert created.status_code == 201
    body = created.json()
    row_id = body["id"]
    assert {k: body[k] for k in ("account", "name", "description", "entries", "keys")} == {
        "account": tenant.account_id,
        "name": "cheap",
        "description": "low",
        "entries": ["gpt-4o-mini", "claude-3-5-haiku"],
        "keys": [],
    }
    assert [r["id"] for r in client.get("/api/access-groups").json()["results"]] == [row_id]

    changed = client.patch(
        f"/api/access-groups/{row_id}", {"entries": ["gpt-*", "gpt-*"]}, format="json"
    )
    assert (changed.status_code, changed.json()["entries"]) == (200, ["gpt-*"])
    assert client.get(f"/api/access-groups/{row_id}").json()["entries"] == ["gpt-*"]

    assert client.delete(f"/api/access-groups/{row_id}").status_code == 204
    assert not AccessGroup.objects.filter(pk=row_id).exists()
    assert actions(tenant.account_id) == [
        "access_group.create",
        "access_group.update",
        "access_group.delete",
    ]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "entries: Ensure this field has at least 1 elements."),
        (
            ["gpt 4o"],
            "entries: Bad model entry: 'gpt 4o' has a character outside letters, digits and "
            ". _ : @ + / - * (only * is a wildcard).",
        ),
        (["a*b*c*d*e*f"], "entries: Bad model entry: 'a*b*c*d*e*f' has more than 4 '*'."),
        (
            [f"m{i}" for i in range(101)],
            "entries: At most 100 model entries are allowed; got 101.",
        ),
    ],
)
def test_bad_entries_are_refused_naming_what_is_wrong(entries, message):
    tenant = make_tenant()

    refused = create(client_for(tenant), "cheap", entries)

    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "LM-2001"
    assert refused.json()["error"]["message"] == message
    assert not AccessGroup.objects.exists()


def test_a_name_is_used_once_per_account_and_says_its_shape():
    tenant, other = make_tenant(), make_tenant()
    client = client_for(tenant)
    assert create(client, "cheap", ["o1"]).status_code == 201

    again = create(client, "cheap", ["o1"])
    odd = create(client, "no spaces", ["o1"])

    assert (again.status_code, again.json()["error"]["message"]) == (
        400,
        "name: An access group 'cheap' exists already.",
    )
    assert odd.json()["error"]["message"] == (
        "name: An access group's name is 1-64 letters, digits, '.', '_' or '-', starting with "
        "a letter or digit."
    )
    assert create(client_for(other), "cheap", ["o1"]).status_code == 201


def test_another_accounts_access_group_is_404_and_cannot_be_assigned():
    mine, theirs = make_tenant(), make_tenant()
    foreign = create(client_for(theirs), "theirs", ["o1"]).json()["id"]
    client = client_for(mine)

    assert client.get(f"/api/access-groups/{foreign}").status_code == 404
    assert (
        client.patch(f"/api/access-groups/{foreign}", {"name": "x"}, format="json").status_code
        == 404
    )
    assert client.delete(f"/api/access-groups/{foreign}").status_code == 404
    refused = client.patch(
        f"/api/keys/{mine.api_key_id}",
        {"access_groups": [foreign], "name": "renamed"},
        format="json",
    )

    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        f"access_groups: No access group {foreign} in this account."
    )
    assert ApiKey.objects.get(pk=mine.api_key_id).name != "renamed"  # nothing was written


def test_viewers_may_read_but_not_write_access_groups():
    tenant = make_tenant()
    client = client_for(tenant)
    row_id = create(client, "cheap", ["o1"]).json()["id"]
    Membership.objects.filter(account_id=tenant.account_id).update(role=Membership.Role.VIEWER)

    assert client.get(f"/api/access-groups/{row_id}").status_code == 200
    assert create(client, "more", ["o1"]).status_code == 403
    assert client.delete(f"/api/access-groups/{row_id}").status_code == 403
    assign = client.patch(
        f"/api/keys/{tenant.api_key_id}", {"access_groups": [row_id]}, format="json"
    )
    assert (assign.status_code, assign.json()["error"]["code"]) == (403, "LM-1003")


def test_keys_and_groups_are_assigned_through_their_patch_and_the_policy_combines_them():
    tenant = make_tenant()
    client = client_for(tenant)
    cheap = create(client, "cheap", ["gpt-4o-mini", "claude-*"]).json()["id"]
    openai_only = create(client, "openai-only", ["openai/*"]).json()["id"]

    key = client.patch(
        f"/api/keys/{tenant.api_key_id}",
        {"access_groups": [cheap], "allowed_models": ["o1"]},
        format="json",
    )
    group = client.patch(
        f"/api/groups/{tenant.group_id}", {"access_groups": [openai_only]}, format="json"
    )

    assert (key.status_code, key.json()["access_groups"]) == (200, [cheap])
    assert (group.status_code, group.json()["access_groups"]) == (200, [openai_only])
    policy = policy_for_key(ApiKey.objects.select_related("group").get(pk=tenant.api_key_id))
    assert (policy.key.entries, policy.group.entries) == (
        ("o1", "gpt-4o-mini", "claude-*"),
        ("openai/*",),
    )

    def permits(profile: str, kind: str, model: str) -> bool:
        return policy.permits(Offering(profile=profile, provider=kind, model=model))

    # The key's side allows these three; the group's bound keeps the OpenAI-kind ones.
    assert [
        permits("p", "openai", "o1"),
        permits("p", "openai", "gpt-4o-mini"),
        permits("p", "anthropic", "claude-3"),
        permits("p", "openai", "claude-3"),
        permits("p", "openai", "gpt-4o"),
    ] == [True, True, False, True, False]
    assert actions(tenant.account_id)[-2:] == ["key.access_groups", "group.access_groups"]

    cleared = client.patch(f"/api/keys/{tenant.api_key_id}", {"access_groups": []}, format="json")
    assert cleared.json()["access_groups"] == []
    entry = AuditEntry.objects.filter(action="key.access_groups").order_by("-id").first()
    assert (entry.before, entry.after) == ({"access_groups": ["cheap"]}, {"access_groups": []})


def test_a_key_is_created_with_its_access_groups():
    tenant = make_tenant()
    client = client_for(tenant)
    cheap = create(client, "cheap", ["gpt-4o-mini"]).json()["id"]

    created = client.post(
        "/api/keys", {"group": tenant.group_id, "access_groups": [cheap]}, format="json"
    )

    assert (created.status_code, created.json()["access_groups"]) == (201, [cheap])
    assert list(AccessGroup.objects.get(pk=cheap).keys.values_list("pk", flat=True)) == [
        created.json()["id"]
    ]
