"""Operators define model access groups in the Django admin a running gateway serves: a save
with its keys is live when the page answers, audited with its assignments, and a key of
another account cannot be assigned."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.models import AccessGroup
from audit.models import AuditEntry
from tests.config.admin_client import admin_login, csrf_token

PASSWORD = "an-operator-password-for-tests"
ADD = "/django-admin/accounts/accessgroup/add/"


@pytest.fixture
def operator(stack):
    get_user_model().objects.create_superuser("ops", "ops@example.invalid", PASSWORD)
    return admin_login(stack.url, username="ops", password=PASSWORD)


def add(operator, **fields) -> str:
    page = operator.get(ADD)
    assert page.status_code == 200, page.text[:500]
    data = {"csrfmiddlewaretoken": csrf_token(page.text), **fields}
    answer = operator.post(ADD, data=data, follow_redirects=True)
    assert answer.status_code == 200, answer.text[:500]
    return answer.text


def test_an_operators_access_group_is_live_and_audited_when_the_page_answers(stack, operator):
    tenant = stack.tenant()
    assert len(list(stack.openai(tenant).models.list())) == 4  # the key is in memory

    add(
        operator,
        account=str(tenant.account_id),
        name="cheap",
        entries='["gpt-4o-mini"]',
        keys=[str(tenant.api_key_id)],
    )

    assert [m.id for m in stack.openai(tenant).models.list()] == ["gpt-4o-mini"]
    entry = AuditEntry.objects.get(action="access_group.create")
    assert (entry.account_id, entry.after["entries"], len(entry.after["keys"])) == (
        tenant.account_id,
        ["gpt-4o-mini"],
        1,
    )


def test_a_key_of_another_account_cannot_be_assigned(stack, operator):
    mine, theirs = stack.tenant(), stack.tenant()

    page = add(
        operator,
        account=str(mine.account_id),
        name="cheap",
        entries='["gpt-4o-mini"]',
        keys=[str(theirs.api_key_id)],
    )

    assert "Only keys and groups of" in page
    assert not AccessGroup.objects.exists()
