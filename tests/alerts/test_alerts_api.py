"""The tenant API for alerts: rules and webhooks scoped to the caller's account, writes for
owners and admins only, a webhook's secret shown once and kept sealed, URLs that would reach
a private network refused, a test send queued and its deliveries listed, every write
audited."""

from __future__ import annotations

import pytest

from accounts.models import Membership
from alerts.models import AlertDelivery, AlertRule, AlertWebhook
from audit.models import AuditEntry
from core.sealing import unseal
from tests.alerts.conftest import allowing_loopback
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


def actions(account_id: int) -> list[str]:
    rows = AuditEntry.objects.filter(account_id=account_id, action__startswith="alert_")
    return list(rows.order_by("seq").values_list("action", flat=True))


def test_a_webhook_secret_is_shown_once_sealed_at_rest_and_never_listed():
    tenant = make_tenant()
    client = client_for(tenant)
    with allowing_loopback():
        created = client.post("/api/webhooks", {"url": "http://127.0.0.1:8999/h"}, format="json")
    assert created.status_code == 201
    body = created.json()
    secret = body["secret"]
    assert secret.startswith("whsec_") and len(secret) == 49
    assert body["secret_prefix"] == secret[:12]
    hook = AlertWebhook.objects.get(pk=body["id"])
    assert secret.encode() not in bytes(hook.secret_sealed)
    assert (
        unseal(bytes(hook.secret_sealed), version=hook.secret_version, bound_to=hook.bound_to())
        == secret
    )
    listed = client.get("/api/webhooks").json()["results"]
    assert [set(row) for row in listed] == [
        {"id", "account", "url", "description", "secret_prefix", "enabled", "created_at"}
    ]
    assert "secret" not in client.get(f"/api/webhooks/{hook.pk}").json()

    rotated = client.post(f"/api/webhooks/{hook.pk}/rotate").json()["secret"]
    hook.refresh_from_db()
    assert rotated != secret and hook.secret_prefix == rotated[:12]
    entries = AuditEntry.objects.filter(account_id=tenant.account_id, action__startswith="alert_")
    assert secret not in str(list(entries.values("before", "after")))
    assert actions(tenant.account_id) == ["alert_webhook.create", "alert_webhook.rotate"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8999/h",
        "http://127.0.0.2/h",
        "https://10.1.2.3/h",
        "http://[::1]/h",
        "http://169.254.169.254/latest/meta-data",
        "http://localhost:8999/h",
        "ftp://example.com/h",
    ],
)
def test_a_webhook_that_would_call_a_private_or_local_address_is_refused(url):
    tenant = make_tenant()
    refused = client_for(tenant).post("/api/webhooks", {"url": url}, format="json")
    assert refused.status_code == 400, refused.json()
    assert not AlertWebhook.objects.exists()


def test_a_webhook_moved_to_a_private_address_is_refused_too():
    tenant = make_tenant()
    client = client_for(tenant)
    with allowing_loopback():
        hook_id = client.post(
            "/api/webhooks", {"url": "http://127.0.0.1:1/h"}, format="json"
        ).json()["id"]
    moved = client.patch(f"/api/webhooks/{hook_id}", {"url": "http://10.0.0.5/h"}, format="json")
    assert moved.status_code == 400
    assert "private address" in str(moved.json())
    assert AlertWebhook.objects.get(pk=hook_id).url == "http://127.0.0.1:1/h"


def test_rules_are_created_checked_changed_and_deleted():
    tenant = make_tenant()
    other = make_tenant()
    client = client_for(tenant)

    group_rule = client.post(
        "/api/alert-rules", {"scope": "group", "group": tenant.group_id}, format="json"
    )
    assert group_rule.status_code == 201
    assert group_rule.json()["threshold_pcts"] == [50, 80, 100]
    rule_id = group_rule.json()["id"]
    bad = [
        {"scope": "group", "group": other.group_id},  # another account's group
        {"scope": "key", "api_key": other.api_key_id},
        {"scope": "tag", "tag": "Not A Tag!"},
        {"scope": "wallet"},  # needs an amount
        {"scope": "group", "group": tenant.group_id, "threshold_pcts": [0]},
        {"scope": "group", "group": tenant.group_id, "threshold_pcts": [50, 50]},
        {"scope": "account", "emails": ["not-an-address"]},
        {"scope": "account", "amount_micro": -1},
    ]
    for body in bad:
        assert client.post("/api/alert-rules", body, format="json").status_code == 400, body
    wallet = client.post(
        "/api/alert-rules", {"scope": "wallet", "amount_micro": 5_000_000}, format="json"
    )
    tag = client.post("/api/alert-rules", {"scope": "tag", "tag": "Team:Search"}, format="json")
    assert (wallet.status_code, tag.status_code, tag.json()["tag"]) == (201, 201, "team:search")

    changed = client.patch(
        f"/api/alert-rules/{rule_id}",
        {"threshold_pcts": [90], "emails": ["ops@example.com"]},
        format="json",
    )
    assert (changed.status_code, changed.json()["threshold_pcts"]) == (200, [90])
    emptied = client.patch(
        f"/api/alert-rules/{wallet.json()['id']}", {"amount_micro": None}, format="json"
    )
    assert emptied.status_code == 400
    assert client.get(f"/api/alert-rules/{rule_id}").json()["emails"] == ["ops@example.com"]
    assert client_for(other).get(f"/api/alert-rules/{rule_id}").status_code == 404
    assert client.delete(f"/api/alert-rules/{rule_id}").status_code == 204
    assert sorted(AlertRule.objects.values_list("scope", flat=True)) == ["tag", "wallet"]
    assert actions(tenant.account_id) == [
        "alert_rule.create",
        "alert_rule.create",
        "alert_rule.create",
        "alert_rule.update",
        "alert_rule.delete",
    ]


def test_viewers_read_but_neither_write_nor_send_tests():
    tenant = make_tenant()
    client = client_for(tenant)
    with allowing_loopback():
        hook_id = client.post(
            "/api/webhooks", {"url": "http://127.0.0.1:1/h"}, format="json"
        ).json()["id"]
    rule_id = client.post(
        "/api/alert-rules", {"scope": "wallet", "amount_micro": 1}, format="json"
    ).json()["id"]
    Membership.objects.filter(account_id=tenant.account_id).update(role=Membership.Role.VIEWER)

    assert client.get(f"/api/alert-rules/{rule_id}").status_code == 200
    assert client.get(f"/api/webhooks/{hook_id}/deliveries").status_code == 200
    refused = [
        client.post("/api/alert-rules", {"scope": "account", "amount_micro": 1}, format="json"),
        client.patch(f"/api/alert-rules/{rule_id}", {"enabled": False}, format="json"),
        client.delete(f"/api/alert-rules/{rule_id}"),
        client.post("/api/webhooks", {"url": "https://example.com/h"}, format="json"),
        client.post(f"/api/webhooks/{hook_id}/test"),
        client.post(f"/api/webhooks/{hook_id}/rotate"),
        client.delete(f"/api/webhooks/{hook_id}"),
    ]
    assert [r.status_code for r in refused] == [403] * 7


def test_a_test_send_is_queued_and_listed_with_the_webhooks_deliveries():
    tenant = make_tenant()
    client = client_for(tenant)
    with allowing_loopback():
        hook_id = client.post(
            "/api/webhooks", {"url": "http://127.0.0.1:1/h"}, format="json"
        ).json()["id"]
    queued = client.post(f"/api/webhooks/{hook_id}/test")
    assert queued.status_code == 202
    delivery = AlertDelivery.objects.get(pk=queued.json()["id"])
    assert (delivery.state, delivery.event_id) == ("pending", f"alerttest_{delivery.pk}")
    assert delivery.payload["type"] == "alert.test"
    listed = client.get(f"/api/webhooks/{hook_id}/deliveries").json()["results"]
    assert [(d["id"], d["state"], d["tries"]) for d in listed] == [(delivery.pk, "pending", [])]
    assert actions(tenant.account_id)[-1] == "alert_webhook.test"
