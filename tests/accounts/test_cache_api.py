"""The response cache's tenant settings and purge through the tenant API: groups and keys read
and write mode, TTL and scope (a key's empty ones follow its group), validated in our error
language, announced to every replica, on the audit trail; a purge drops only the caller's
account's answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from accounts.models import ApiKey, Group, Membership
from audit.models import AuditEntry
from core.response_cache import account_prefix
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def cache_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.TOLLGATE["CACHE_REDIS_URL"])
    yield client
    client.close()


def last_entry(account_id: int) -> AuditEntry:
    entry = AuditEntry.objects.filter(account_id=account_id).order_by("-id").first()
    assert entry is not None, "no audit entry"
    return entry


def test_a_group_shows_its_cache_settings_with_their_defaults():
    tenant = make_tenant()

    group = client_for(tenant).get(f"/api/groups/{tenant.group_id}").json()

    assert (group["cache_mode"], group["cache_ttl_s"], group["cache_scope"]) == (
        "on_request",
        3600,
        "account",
    )


def test_a_group_change_is_stored_announced_and_audited(announced):
    tenant = make_tenant()

    response = client_for(tenant).patch(
        f"/api/groups/{tenant.group_id}",
        {"cache_mode": "always", "cache_ttl_s": 600, "cache_scope": "key"},
        format="json",
    )

    assert response.status_code == 200
    assert (response.json()["cache_mode"], response.json()["cache_ttl_s"]) == ("always", 600)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.cache_mode, group.cache_ttl_s, group.cache_scope) == ("always", 600, "key")
    assert announced == [("group", {"group_id": tenant.group_id})]
    entry = last_entry(tenant.account_id)
    assert entry.action == "group.update"
    assert entry.before == {
        "cache_mode": "on_request",
        "cache_ttl_s": 3600,
        "cache_scope": "account",
    }
    assert entry.after == {"cache_mode": "always", "cache_ttl_s": 600, "cache_scope": "key"}


def test_a_group_is_created_with_cache_settings():
    tenant = make_tenant()

    response = client_for(tenant).post(
        "/api/groups", {"name": "cached", "cache_mode": "off"}, format="json"
    )

    assert response.status_code == 201
    created = Group.objects.get(pk=response.json()["id"])
    assert (created.cache_mode, created.cache_ttl_s, created.cache_scope) == (
        "off",
        3600,
        "account",
    )
    assert last_entry(tenant.account_id).after["cache_mode"] == "off"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"cache_mode": "sometimes"},
            'cache_mode: "sometimes" is not one of off, on_request, always.',
        ),
        (
            {"cache_scope": "world"},
            'cache_scope: "world" is not one of account, group, key, caller.',
        ),
        ({"cache_ttl_s": 0}, "cache_ttl_s: Ensure this value is greater than or equal to 1."),
        (
            {"cache_ttl_s": 2**31},
            "cache_ttl_s: Ensure this value is less than or equal to 2147483647.",
        ),
        ({"cache_mode": ""}, 'cache_mode: "" is not one of off, on_request, always.'),
        ({"cache_ttl_s": None}, "cache_ttl_s: This field may not be null."),
    ],
)
def test_a_bad_group_cache_setting_is_a_400_naming_it(body, message):
    tenant = make_tenant()

    response = client_for(tenant).patch(f"/api/groups/{tenant.group_id}", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": message,
        "type": "invalid_request_error",
        "code": "LM-2001",
    }
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.cache_mode, group.cache_ttl_s, group.cache_scope) == (
        "on_request",
        3600,
        "account",
    )


def test_a_key_follows_its_group_until_it_sets_its_own(announced):
    tenant = make_tenant()
    client = client_for(tenant)

    shown = client.get(f"/api/keys/{tenant.api_key_id}").json()
    assert (shown["cache_mode"], shown["cache_ttl_s"], shown["cache_scope"]) == ("", None, "")

    response = client.patch(
        f"/api/keys/{tenant.api_key_id}",
        {"cache_mode": "always", "cache_ttl_s": 120, "cache_scope": "caller"},
        format="json",
    )

    assert response.status_code == 200
    assert (response.json()["cache_mode"], response.json()["cache_scope"]) == ("always", "caller")
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (api_key.cache_mode, api_key.cache_ttl_s, api_key.cache_scope) == (
        "always",
        120,
        "caller",
    )
    assert announced == [("api_key", api_key.eviction())]
    assert api_key.eviction()["key_hashes"] == [api_key.key_hash]  # never rotated: one secret
    entry = last_entry(tenant.account_id)
    assert (entry.action, entry.target_type, entry.target_id) == (
        "key.update",
        "key",
        str(tenant.api_key_id),
    )
    assert entry.before == {"cache_mode": "", "cache_ttl_s": None, "cache_scope": ""}
    assert entry.after == {"cache_mode": "always", "cache_ttl_s": 120, "cache_scope": "caller"}


def test_a_key_goes_back_to_its_group_with_null_or_empty():
    tenant = make_tenant()
    client = client_for(tenant)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(
        cache_mode="off", cache_ttl_s=60, cache_scope="key"
    )

    response = client.patch(
        f"/api/keys/{tenant.api_key_id}",
        {"cache_mode": None, "cache_ttl_s": None, "cache_scope": ""},
        format="json",
    )

    assert response.status_code == 200
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (api_key.cache_mode, api_key.cache_ttl_s, api_key.cache_scope) == ("", None, "")


def test_a_key_is_created_with_its_own_cache_settings():
    tenant = make_tenant()

    response = client_for(tenant).post(
        "/api/keys",
        {"group": tenant.group_id, "cache_mode": "off", "cache_scope": None},
        format="json",
    )

    assert response.status_code == 201
    created = ApiKey.objects.get(pk=response.json()["id"])
    assert (created.cache_mode, created.cache_ttl_s, created.cache_scope) == ("off", None, "")
    assert last_entry(tenant.account_id).after["cache_mode"] == "off"


def test_a_key_patch_changes_only_what_it_names():
    tenant = make_tenant()

    response = client_for(tenant).patch(
        f"/api/keys/{tenant.api_key_id}", {"name": "renamed", "rpm_limit": 5}, format="json"
    )

    assert response.status_code == 200
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (api_key.name, api_key.rpm_limit, api_key.cache_mode) == ("renamed", 5, "")


def test_a_bad_key_cache_setting_is_a_400_naming_it():
    tenant = make_tenant()

    response = client_for(tenant).patch(
        f"/api/keys/{tenant.api_key_id}", {"cache_scope": "everyone"}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        'cache_scope: "everyone" is not one of account, group, key, caller.'
    )
    assert ApiKey.objects.get(pk=tenant.api_key_id).cache_scope == ""


def test_viewers_may_not_change_cache_settings_nor_another_accounts_key():
    mine, theirs = make_tenant(), make_tenant()
    client = client_for(mine)

    foreign = client.patch(f"/api/keys/{theirs.api_key_id}", {"cache_mode": "off"}, format="json")
    Membership.objects.filter(account_id=mine.account_id).update(role=Membership.Role.VIEWER)
    viewer = client.patch(f"/api/keys/{mine.api_key_id}", {"cache_mode": "off"}, format="json")
    group = client.patch(f"/api/groups/{mine.group_id}", {"cache_mode": "off"}, format="json")

    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "LM-2004")
    assert (viewer.status_code, viewer.json()["error"]["code"]) == (403, "LM-1003")
    assert group.status_code == 403
    assert ApiKey.objects.get(pk=theirs.api_key_id).cache_mode == ""
    assert ApiKey.objects.get(pk=mine.api_key_id).cache_mode == ""
    assert Group.objects.get(pk=mine.group_id).cache_mode == "on_request"


# ---------------------------------------------------------------- purge


def test_purge_drops_only_the_callers_answers_and_is_audited(announced, cache_redis):
    mine, theirs = make_tenant(), make_tenant()
    for n in range(3):
        cache_redis.set(f"{account_prefix(mine.account_id)}digest{n}", b"answer")
    cache_redis.set(f"{account_prefix(theirs.account_id)}digest0", b"theirs")

    response = client_for(mine).post("/api/cache/purge", {}, format="json")

    assert response.status_code == 200
    assert response.json() == {"purged": 3}
    assert list(cache_redis.scan_iter(match=f"{account_prefix(mine.account_id)}*")) == []
    assert cache_redis.get(f"{account_prefix(theirs.account_id)}digest0") == b"theirs"
    assert announced == [("cache_purge", {"account_id": mine.account_id})]
    entry = last_entry(mine.account_id)
    assert (entry.action, entry.target_type, entry.after) == (
        "cache.purge",
        "account",
        {"purged": 3},
    )
    cache_redis.delete(f"{account_prefix(theirs.account_id)}digest0")


def test_purge_of_an_empty_cache_answers_zero():
    tenant = make_tenant()

    response = client_for(tenant).post(
        "/api/cache/purge", {"account": tenant.account_id}, format="json"
    )

    assert (response.status_code, response.json()) == (200, {"purged": 0})


def test_purge_is_for_owners_and_admins_of_the_callers_own_account(cache_redis):
    mine, theirs = make_tenant(), make_tenant()
    cache_redis.set(f"{account_prefix(theirs.account_id)}kept", b"theirs")
    client = client_for(mine)

    foreign = client.post("/api/cache/purge", {"account": theirs.account_id}, format="json")
    Membership.objects.filter(account_id=mine.account_id).update(role=Membership.Role.VIEWER)
    viewer = client.post("/api/cache/purge", {}, format="json")

    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "LM-2004")
    assert (viewer.status_code, viewer.json()["error"]["code"]) == (403, "LM-1003")
    assert cache_redis.get(f"{account_prefix(theirs.account_id)}kept") == b"theirs"
    assert not AuditEntry.objects.filter(action="cache.purge").exists()
    cache_redis.delete(f"{account_prefix(theirs.account_id)}kept")
