"""guardrails_for: one key's guardrails are those attached to its account, its group or
itself, enabled, each once, the operator's first then by id; another account's never; and
the bounds on guardrails and attachments per account hold."""

from __future__ import annotations

import pytest

from accounts.models import Account, ApiKey, Group
from guardrails import services
from guardrails.models import (
    ATTACHMENTS_PER_ACCOUNT_MAX,
    GUARDRAILS_PER_ACCOUNT_MAX,
    Guardrail,
    GuardrailAttachment,
)
from guardrails.rules import GuardrailInvalid
from guardrails.selectors import GuardrailSpec, guardrails_for
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


def custom(account: Account | None, name: str, **fields) -> Guardrail:
    guardrail, _ = services.guardrail_create(
        account=account, name=name, kind="custom", words=[name], **fields
    )
    return guardrail


def names(specs: tuple[GuardrailSpec, ...]) -> list[str]:
    return [spec.name for spec in specs]


def test_account_group_and_key_attachments_resolve_once_each_in_a_stable_order():
    tenant = make_tenant()
    account = Account.objects.get(pk=tenant.account_id)
    group = Group.objects.get(pk=tenant.group_id)
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    other_group = Group.objects.create(account=account, name="other")
    on_account = custom(account, "on-account")
    on_group = custom(account, "on-group")
    on_key = custom(account, "on-key")
    on_other_group = custom(account, "on-other-group")
    disabled = custom(account, "disabled", enabled=False)
    pii, _ = services.guardrail_create(
        account=None, name="pii", kind="detectors", detectors=["email", "us_ssn"], phase="input"
    )
    services.attachment_create(guardrail=on_key, account=account, api_key=key)
    services.attachment_create(guardrail=on_group, account=account, group=group)
    services.attachment_create(guardrail=on_account, account=account)
    services.attachment_create(guardrail=on_other_group, account=account, group=other_group)
    services.attachment_create(guardrail=disabled, account=account)
    # The same guardrail at three levels: once.
    services.attachment_create(guardrail=pii, account=account, by=services.OPERATOR)
    services.attachment_create(guardrail=pii, account=account, group=group)
    services.attachment_create(guardrail=pii, account=account, api_key=key)

    specs = guardrails_for(tenant.account_id, tenant.group_id, tenant.api_key_id)

    assert names(specs) == ["pii", "on-account", "on-group", "on-key"]
    assert specs[0] == GuardrailSpec(
        id=pii.pk,
        name="pii",
        kind="detectors",
        phase="input",
        action="block",
        detectors=("email", "us_ssn"),
        patterns=(),
        words=(),
        moderation_model="",
        moderation_threshold=None,
        webhook_url="",
        webhook_secret="",
        deadline_ms=2000,
        fail_mode="open",
        updated_at=pii.updated_at,
        operators=True,
    )
    assert names(guardrails_for(tenant.account_id, tenant.group_id)) == [
        "pii",
        "on-account",
        "on-group",
    ]
    assert names(guardrails_for(tenant.account_id, other_group.pk)) == [
        "pii",
        "on-account",
        "on-other-group",
    ]
    assert names(guardrails_for(tenant.account_id)) == ["pii", "on-account"]

    services.guardrail_update(guardrail=pii, by=services.OPERATOR, enabled=False)
    assert names(guardrails_for(tenant.account_id, tenant.group_id, tenant.api_key_id)) == [
        "on-account",
        "on-group",
        "on-key",
    ]


def test_another_accounts_guardrails_never_apply():
    mine, theirs = make_tenant(), make_tenant()
    their_account = Account.objects.get(pk=theirs.account_id)
    theirs_only = custom(their_account, "theirs")
    services.attachment_create(guardrail=theirs_only, account=their_account)
    moderation, _ = services.guardrail_create(
        account=None,
        name="moderation",
        kind="moderation",
        moderation_model="omni-moderation-latest",
        moderation_threshold=0.5,
        fail_mode="closed",
        deadline_ms=800,
    )
    services.attachment_create(guardrail=moderation, account=their_account, by="operator")

    assert guardrails_for(mine.account_id, mine.group_id, mine.api_key_id) == ()
    # Their ids passed with my account still find nothing of theirs.
    assert guardrails_for(mine.account_id, theirs.group_id, theirs.api_key_id) == ()
    (first, second) = guardrails_for(theirs.account_id, theirs.group_id, theirs.api_key_id)
    assert (first.kind, first.moderation_model, first.moderation_threshold) == (
        "moderation",
        "omni-moderation-latest",
        0.5,
    )
    assert (first.fail_mode, first.deadline_ms, second.name) == ("closed", 800, "theirs")
    with pytest.raises(GuardrailInvalid) as refused:
        services.attachment_create(
            guardrail=theirs_only, account=Account.objects.get(pk=mine.account_id)
        )
    assert (refused.value.field, refused.value.message) == (
        "guardrail",
        "A guardrail of this account or the operator's.",
    )


def test_an_account_holds_a_bounded_number_of_guardrails_and_attachments():
    tenant = make_tenant()
    account = Account.objects.get(pk=tenant.account_id)
    Guardrail.objects.bulk_create(
        Guardrail(account=account, name=f"g{n}", kind="custom", words=["x"])
        for n in range(GUARDRAILS_PER_ACCOUNT_MAX)
    )
    with pytest.raises(GuardrailInvalid) as refused:
        custom(account, "one-more")
    assert refused.value.message == "An account has at most 50 guardrails."

    group = Group.objects.get(pk=tenant.group_id)
    groups = Group.objects.bulk_create(
        Group(account=account, name=f"group{n}") for n in range(ATTACHMENTS_PER_ACCOUNT_MAX // 2)
    )
    first, second = Guardrail.objects.filter(account=account).order_by("id")[:2]
    GuardrailAttachment.objects.bulk_create(
        GuardrailAttachment(guardrail=g, account=account, group=row, attached_by="tenant")
        for row in groups
        for g in (first, second)
    )
    with pytest.raises(GuardrailInvalid) as refused:
        services.attachment_create(guardrail=first, account=account, group=group)
    assert refused.value.message == "An account has at most 100 guardrail attachments."
