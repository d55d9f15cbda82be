"""Operators set an account's provider in the Django admin: sealed secret, audited, and the
same guard as the owner's page."""

from __future__ import annotations

import pytest

from accounts.models import Account
from audit.models import AuditEntry
from sso.models import IdentityLink, Provider
from tests.config.test_admin_pages import operator  # noqa: F401  (a fixture)
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db

ADD = "/django-admin/sso/provider/add/"
SECRET = "operator-typed-client-secret-42"


def form(account: Account, **changes) -> dict:
    fields = {
        "account": account.pk,
        "issuer": "https://acme.example.com",
        "client_id": "tollgate",
        "client_secret": SECRET,
        "display_name": "Acme",
        "jit_domains": '["acme.example.com"]',
        "jit_role": "viewer",
        "groups_claim": "groups",
        "enabled": "on",
        "password_sign_in": "on",
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


def test_an_operator_adds_a_provider_sealed_and_audited(operator):  # noqa: F811
    account = Account.objects.get(pk=make_tenant().account_id)
    reply = operator.post(ADD, form(account))
    assert reply.status_code == 302, reply.content[:2000]
    provider = Provider.objects.get(account=account)
    assert provider.client_secret() == SECRET
    assert SECRET.encode() not in bytes(provider.client_secret_sealed)
    entry = AuditEntry.objects.get(account_id=account.pk, action="sso.settings")
    assert entry.actor_kind == "operator"
    assert SECRET not in str(entry.after)
    page = operator.get(f"/django-admin/sso/provider/{provider.pk}/change/").content.decode()
    assert SECRET not in page


def test_the_admin_keeps_passwords_on_until_an_owner_is_linked(operator):  # noqa: F811
    account = Account.objects.get(pk=make_tenant().account_id)
    reply = operator.post(ADD, form(account, password_sign_in=None))
    assert reply.status_code == 200
    assert "Password sign-in stays on" in reply.content.decode()
    assert not Provider.objects.exists()


def test_deleting_a_link_is_audited(operator):  # noqa: F811
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("ana")
    link = IdentityLink.objects.create(issuer="https://acme.example.com", subject="s", user=user)
    reply = operator.post(f"/django-admin/sso/identitylink/{link.pk}/delete/", {"post": "yes"})
    assert reply.status_code == 302
    assert AuditEntry.objects.filter(action="sso.unlink", target_id=str(link.pk)).exists()
