"""Keys' and groups' default tags through the tenant API: read, written on create and PATCH
(cleaned by core/tags.py's rules, or a 400 naming them), on the audit trail, and announced
to every replica so the gateway's cached principals drop the old ones."""

from __future__ import annotations

import pytest

from accounts.models import ApiKey, Group
from audit.models import AuditEntry
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


def last_entry(account_id: int) -> AuditEntry:
    entry = AuditEntry.objects.filter(account_id=account_id).order_by("-id").first()
    assert entry is not None, "no audit entry"
    return entry


def test_a_group_patch_cleans_stores_audits_and_announces(announced):
    tenant = make_tenant()
    response = client_for(tenant).patch(
        f"/api/groups/{tenant.group_id}",
        {"default_tags": ["Team:Search", "env:prod", "team:search"]},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["default_tags"] == ["team:search", "env:prod"]
    assert Group.objects.get(pk=tenant.group_id).default_tags == ["team:search", "env:prod"]
    assert announced == [("group", {"group_id": tenant.group_id})]
    entry = last_entry(tenant.account_id)
    assert (entry.action, entry.before, entry.after) == (
        "group.update",
        {"default_tags": []},
        {"default_tags": ["team:search", "env:prod"]},
    )


def test_a_key_patch_is_announced_as_a_key_change(announced):
    tenant = make_tenant()
    response = client_for(tenant).patch(
        f"/api/keys/{tenant.api_key_id}", {"default_tags": ["customer-42"]}, format="json"
    )
    assert response.status_code == 200
    assert ApiKey.objects.get(pk=tenant.api_key_id).default_tags == ["customer-42"]
    assert [topic for topic, _ in announced] == ["api_key"]
    assert last_entry(tenant.account_id).after == {"default_tags": ["customer-42"]}


def test_keys_and_groups_are_created_with_default_tags():
    tenant = make_tenant()
    client = client_for(tenant)
    group = client.post("/api/groups", {"name": "g", "default_tags": ["a"]}, format="json")
    assert group.status_code == 201 and group.json()["default_tags"] == ["a"]
    key = client.post(
        "/api/keys", {"group": group.json()["id"], "default_tags": ["b", "B"]}, format="json"
    )
    assert key.status_code == 201 and key.json()["default_tags"] == ["b"]
    assert last_entry(tenant.account_id).after["default_tags"] == ["b"]
    assert client.get(f"/api/keys/{key.json()['id']}").json()["default_tags"] == ["b"]


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        (["bad tag"], "default_tags: Tag 'bad tag' is not valid: a tag is 1-64 characters"),
        ([f"t{i}" for i in range(11)], "default_tags: At most 10 tags per request"),
        (["x" * 65], "is not valid: a tag is 1-64 characters"),
        ("team:a", 'default_tags: Expected a list of items but got type "str".'),
    ],
)
def test_a_bad_default_tag_is_a_400_naming_the_rule(tags, message):
    tenant = make_tenant()
    response = client_for(tenant).patch(
        f"/api/keys/{tenant.api_key_id}", {"default_tags": tags}, format="json"
    )
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
    assert response.json()["error"]["code"] == "LM-2001"
    assert ApiKey.objects.get(pk=tenant.api_key_id).default_tags == []


def test_the_operators_admin_edits_them_by_the_same_rules(announced):
    import re

    from django.contrib.auth import get_user_model
    from django.test import Client

    tenant = make_tenant()
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("root", "r@x.invalid", "pw"))
    url = f"/django-admin/accounts/group/{tenant.group_id}/change/"
    form = operator.get(url).content.decode()
    fields = {
        name: value
        for name, value in re.findall(r'name="(\w+)" value="([^"]*)"', form)
        if name != "csrfmiddlewaretoken"
    }
    selects = {
        name: re.search(r'<option value="([^"]*)" selected', options).group(1)
        for name, options in re.findall(r'<select name="(\w+)"[^>]*>(.*?)</select>', form, re.S)
    }

    refused = operator.post(url, {**fields, **selects, "default_tags": '["no spaces"]'})
    assert refused.status_code == 200
    assert "Tag &#x27;no spaces&#x27; is not valid" in refused.content.decode()
    saved = operator.post(url, {**fields, **selects, "default_tags": '["Team:A", "team:a"]'})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert Group.objects.get(pk=tenant.group_id).default_tags == ["team:a"]
    assert ("group", {"group_id": tenant.group_id}) in announced
