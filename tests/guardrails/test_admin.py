"""Guardrails in the operator's admin: every kind defined (a webhook's secret shown once,
in the message after the save, and sealed), refused patterns named on the form, attachments
made and removed, each change on the operator's or the account's trail and announced to the
gateways; the lists search and filter and never show a secret."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from audit.models import AuditEntry
from core.sealing import unseal
from guardrails import services
from guardrails.models import Guardrail, GuardrailAttachment
from tests.alerts.conftest import allowing_loopback
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db
ADD = "/django-admin/guardrails/guardrail/add/"
ATTACH = "/django-admin/guardrails/guardrailattachment/add/"
SECRET_SHOWN = re.compile(r"shown this once: (whsec_[A-Za-z0-9_-]{43})")


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_superuser("ops", "ops@example.invalid", "pw")
    client = Client()
    client.force_login(user)
    return client


def guardrail_form(**fields) -> dict:
    return {
        "name": "",
        "description": "",
        "kind": "detectors",
        "phase": "both",
        "action": "block",
        "detectors": "",
        "patterns": "",
        "words": "",
        "moderation_model": "",
        "moderation_threshold": "",
        "webhook_url": "",
        "deadline_ms": "2000",
        "fail_mode": "open",
        "enabled": "on",
        **fields,
    }


def test_an_operator_webhook_guardrail_shows_its_secret_once_and_is_audited(operator):
    with allowing_loopback():
        saved = operator.post(
            ADD,
            guardrail_form(
                name="ops-hook",
                kind="webhook",
                webhook_url="http://127.0.0.1:9/check",
                fail_mode="closed",
            ),
            follow=True,
        )

    assert saved.status_code == 200
    secret = SECRET_SHOWN.search(saved.content.decode()).group(1)
    row = Guardrail.objects.get()
    assert (row.account_id, row.kind, row.fail_mode) == (None, "webhook", "closed")
    assert unseal(
        bytes(row.secret_sealed), version=row.secret_version, bound_to=row.bound_to()
    ) == (secret)
    change_page = operator.get(f"/django-admin/guardrails/guardrail/{row.pk}/change/")
    assert secret not in change_page.content.decode()
    assert secret[:12] in change_page.content.decode()  # the prefix, to recognise it
    entry = AuditEntry.objects.get(action="guardrail.create")
    assert (entry.account_id, entry.actor_kind, entry.after["secret_prefix"]) == (
        None,
        "operator",
        secret[:12],
    )
    assert secret not in str(entry.after)


def test_a_refused_pattern_or_tenant_moderation_is_named_on_the_form(operator):
    tenant = make_tenant()
    page = operator.post(
        ADD, guardrail_form(name="bad", kind="custom", patterns='["(unclosed"]')
    ).content.decode()
    assert "pattern 1: RE2 cannot compile it: missing ): (unclosed" in page
    page = operator.post(
        ADD,
        guardrail_form(
            name="mod",
            kind="moderation",
            account=str(tenant.account_id),
            moderation_model="omni-moderation-latest",
        ),
    ).content.decode()
    assert "A moderation guardrail is the operator&#x27;s; an account defines custom or" in page
    assert not Guardrail.objects.exists()


def test_operator_detectors_attached_in_the_admin_are_audited_and_announced(
    operator, announced, django_capture_on_commit_callbacks
):
    tenant = make_tenant()
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(ADD, guardrail_form(name="pii", detectors='["email", "iban"]'))
    pii = Guardrail.objects.get()
    assert (pii.detectors, pii.patterns, pii.words) == (["email", "iban"], [], [])
    assert announced == []

    with django_capture_on_commit_callbacks(execute=True):
        attached = operator.post(
            ATTACH,
            {
                "guardrail": str(pii.pk),
                "account": str(tenant.account_id),
                "group": str(tenant.group_id),
                "api_key": "",
                "attached_by": "operator",
            },
        )
    assert attached.status_code == 302, attached.content.decode()[:2000]
    attachment = GuardrailAttachment.objects.get()
    assert (attachment.group_id, attachment.attached_by) == (tenant.group_id, "operator")
    assert announced == [("group", {"account_id": tenant.account_id})]

    announced.clear()
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(
            f"/django-admin/guardrails/guardrailattachment/{attachment.pk}/delete/",
            {"post": "yes"},
        )
        operator.post(f"/django-admin/guardrails/guardrail/{pii.pk}/delete/", {"post": "yes"})
    assert not Guardrail.objects.exists()
    assert announced == [("group", {"account_id": tenant.account_id})]
    assert list(
        AuditEntry.objects.filter(account_id=tenant.account_id, action__startswith="guardrail")
        .order_by("seq")
        .values_list("action", "actor_kind")
    ) == [("guardrail.attach", "operator"), ("guardrail.detach", "operator")]
    assert list(
        AuditEntry.objects.filter(account_id=None, action__startswith="guardrail")
        .order_by("seq")
        .values_list("action", flat=True)
    ) == ["guardrail.create", "guardrail.delete"]


def test_the_lists_search_and_filter(operator):
    tenant = make_tenant()
    pii, _ = services.guardrail_create(
        account=None, name="pii", kind="detectors", detectors=["email"]
    )
    attachment = services.attachment_create(
        guardrail=pii, account=services.Account.objects.get(pk=tenant.account_id)
    )
    base = "/django-admin/guardrails"
    for url, row in (
        (f"{base}/guardrail/?q=pii&kind__exact=detectors&enabled__exact=1", pii),
        (f"{base}/guardrailattachment/?q=pii&attached_by__exact=tenant", attachment),
    ):
        page = operator.get(url)
        assert page.status_code == 200
        assert f"/{row.pk}/change/" in page.content.decode()
    assert f"/{pii.pk}/change/" not in operator.get(f"{base}/guardrail/?q=nothing").content.decode()


def test_rotating_a_webhook_secret_shows_the_new_one_once(operator):
    with allowing_loopback():
        hook, first = services.guardrail_create(
            account=None, name="ops-hook", kind="webhook", webhook_url="http://127.0.0.1:9/x"
        )
    page = operator.post(
        "/django-admin/guardrails/guardrail/",
        {"action": "rotate_secret", "_selected_action": [str(hook.pk)]},
        follow=True,
    ).content.decode()

    second = SECRET_SHOWN.search(page).group(1)
    hook.refresh_from_db()
    assert second != first
    assert unseal(
        bytes(hook.secret_sealed), version=hook.secret_version, bound_to=hook.bound_to()
    ) == (second)
    entry = AuditEntry.objects.get(action="guardrail.rotate")
    assert (entry.before, entry.after) == (
        {"secret_prefix": first[:12]},
        {"secret_prefix": second[:12]},
    )
