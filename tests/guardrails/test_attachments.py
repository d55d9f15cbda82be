"""Attaching guardrails: a tenant attaches its own and the operator's guardrails to its
account, groups and keys and detaches its own attachments; what the operator attached it can
neither detach nor weaken; every change is audited and evicts the account's cached
principals on every gateway (what the bus receives)."""

from __future__ import annotations

import pytest

from accounts.models import Account, ApiKey
from audit.models import AuditEntry
from guardrails import services
from guardrails.models import GuardrailAttachment
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


def tenant_account(tenant) -> Account:
    return Account.objects.get(pk=tenant.account_id)


def evictions(account_id: int) -> list[tuple[str, dict]]:
    return [("group", {"account_id": account_id})]


def test_a_tenant_attaches_the_operators_guardrail_to_a_key_and_detaches_it(
    announced, django_capture_on_commit_callbacks
):
    tenant = make_tenant()
    client = client_for(tenant)
    pii, _ = services.guardrail_create(
        account=None, name="pii", kind="detectors", detectors=["email"]
    )
    assert announced == []  # attached nowhere yet: no gateway holds it

    with django_capture_on_commit_callbacks(execute=True):
        created = client.post(
            "/api/guardrail-attachments",
            {"guardrail": f"grd_{pii.pk}", "api_key": tenant.api_key_id},
            format="json",
        )

    assert created.status_code == 201, created.json()
    row = GuardrailAttachment.objects.get()
    body = created.json()
    body.pop("created_at")
    assert body == {
        "id": f"gatt_{row.pk}",
        "guardrail": f"grd_{pii.pk}",
        "guardrail_name": "pii",
        "account": tenant.account_id,
        "group": None,
        "api_key": tenant.api_key_id,
        "attached_by": "tenant",
    }
    assert announced == evictions(tenant.account_id)
    twice = client.post(
        "/api/guardrail-attachments",
        {"guardrail": f"grd_{pii.pk}", "api_key": tenant.api_key_id},
        format="json",
    )
    assert twice.json()["error"]["message"] == (
        "guardrail: This guardrail is attached there already."
    )
    both = client.post(
        "/api/guardrail-attachments",
        {"guardrail": f"grd_{pii.pk}", "api_key": tenant.api_key_id, "group": tenant.group_id},
        format="json",
    )
    assert both.json()["error"]["message"] == "api_key: Attach to a group or a key, not both."

    announced.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert client.delete(f"/api/guardrail-attachments/gatt_{row.pk}").status_code == 204
    assert announced == evictions(tenant.account_id)
    assert not GuardrailAttachment.objects.exists()
    entries = AuditEntry.objects.filter(
        account_id=tenant.account_id, action__startswith="guardrail"
    )
    assert [(e.action, e.before, e.after) for e in entries.order_by("seq")] == [
        (
            "guardrail.attach",
            {},
            {
                "guardrail_id": pii.pk,
                "guardrail": "pii",
                "group_id": None,
                "api_key_id": tenant.api_key_id,
                "attached_by": "tenant",
            },
        ),
        (
            "guardrail.detach",
            {
                "guardrail_id": pii.pk,
                "guardrail": "pii",
                "group_id": None,
                "api_key_id": tenant.api_key_id,
                "attached_by": "tenant",
            },
            {},
        ),
    ]


def test_a_tenant_cannot_detach_or_weaken_what_the_operator_attached():
    tenant = make_tenant()
    client = client_for(tenant)
    own = client.post(
        "/api/guardrails", {"name": "mine", "kind": "custom", "words": ["x"]}, format="json"
    ).json()["id"]
    own_row = services.Guardrail.objects.get(name="mine")
    account = own_row.account
    attachment = services.attachment_create(
        guardrail=own_row, account=account, by=services.OPERATOR
    )

    detach = client.delete(f"/api/guardrail-attachments/gatt_{attachment.pk}")
    assert detach.status_code == 403
    assert detach.json()["error"]["message"] == (
        "The operator attached this guardrail: only the operator can detach it."
    )
    for answer in (
        client.patch(f"/api/guardrails/{own}", {"enabled": False}, format="json"),
        client.patch(f"/api/guardrails/{own}", {"words": ["y"]}, format="json"),
        client.delete(f"/api/guardrails/{own}"),
    ):
        assert answer.status_code == 403
        assert answer.json()["error"]["message"] == (
            "The operator attached this guardrail: only the operator can change or delete it."
        )
    own_row.refresh_from_db()
    assert (own_row.enabled, own_row.words) == (True, ["x"])
    assert GuardrailAttachment.objects.filter(pk=attachment.pk).exists()


def test_the_operator_attaching_where_the_tenant_had_takes_the_attachment_over(
    announced, django_capture_on_commit_callbacks
):
    tenant = make_tenant()
    pii, _ = services.guardrail_create(
        account=None, name="pii", kind="detectors", detectors=["email"]
    )
    account = tenant_account(tenant)
    tenants = services.attachment_create(guardrail=pii, account=account)

    with django_capture_on_commit_callbacks(execute=True):
        taken = services.attachment_create(guardrail=pii, account=account, by=services.OPERATOR)

    assert (taken.pk, taken.attached_by) == (tenants.pk, "operator")
    assert announced == evictions(tenant.account_id)
    entry = AuditEntry.objects.filter(action="guardrail.attach").order_by("-seq").first()
    assert (entry.before, entry.after) == ({"attached_by": "tenant"}, {"attached_by": "operator"})
    answer = client_for(tenant).delete(f"/api/guardrail-attachments/gatt_{taken.pk}")
    assert answer.status_code == 403


def test_an_operator_guardrails_change_evicts_every_account_it_is_attached_to(
    announced, django_capture_on_commit_callbacks
):
    first, second, unrelated = make_tenant(), make_tenant(), make_tenant()
    pii, _ = services.guardrail_create(
        account=None, name="pii", kind="detectors", detectors=["email"]
    )
    services.attachment_create(guardrail=pii, account=tenant_account(first))
    services.attachment_create(
        guardrail=pii,
        account=tenant_account(second),
        api_key=ApiKey.objects.get(pk=second.api_key_id),
        by=services.OPERATOR,
    )

    with django_capture_on_commit_callbacks(execute=True):
        services.guardrail_update(guardrail=pii, by=services.OPERATOR, action="redact")
    assert announced == [*evictions(first.account_id), *evictions(second.account_id)]
    assert unrelated.account_id not in [payload["account_id"] for _, payload in announced]

    announced.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.guardrail_delete(guardrail=pii, by=services.OPERATOR)
    assert announced == [*evictions(first.account_id), *evictions(second.account_id)]
    assert not GuardrailAttachment.objects.exists()
    assert AuditEntry.objects.filter(account_id=None, action="guardrail.delete").count() == 1


def test_a_tenant_guardrails_change_evicts_its_account(
    announced, django_capture_on_commit_callbacks
):
    tenant = make_tenant()
    client = client_for(tenant)
    with django_capture_on_commit_callbacks(execute=True):
        guardrail_id = client.post(
            "/api/guardrails", {"name": "m", "kind": "custom", "words": ["x"]}, format="json"
        ).json()["id"]
        client.patch(f"/api/guardrails/{guardrail_id}", {"enabled": False}, format="json")
        client.delete(f"/api/guardrails/{guardrail_id}")
    assert announced == evictions(tenant.account_id) * 3
