"""Guardrails' and attachments' writes: checked (guardrails/rules.py), on the audit trail,
and announced to every gateway replica once committed.

A webhook guardrail's secret is made here, returned once to its creator and kept sealed under
the master key bound to its row (core/sealing.py), as alert webhooks' are: the gateway needs
it to sign each call. The trail records it by prefix, never the secret.

`by` says who writes: the operator (the admin) may do anything; a tenant (the API) may change
only its own account's guardrails, and neither detach what the operator attached nor change
or delete a guardrail the operator attached: a client cannot turn a guardrail off.

The gateways cache each key's principal, which will carry its guardrails: every change
publishes the bus message that evicts an account's keys and groups
(`accounts.services.account_changed`) for each account it
touches, once the transaction commits (a replica reading before would cache the old rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Account, ApiKey, Group
from accounts.services import account_changed, audited
from audit import services as audit
from audit.actors import Actor
from core.sealing import seal
from core.webhook_signing import new_secret
from guardrails.models import (
    ATTACHMENTS_PER_ACCOUNT_MAX,
    GUARDRAILS_PER_ACCOUNT_MAX,
    Guardrail,
    GuardrailAttachment,
)
from guardrails.rules import GuardrailInvalid, check_guardrail

OPERATOR = GuardrailAttachment.By.OPERATOR
TENANT = GuardrailAttachment.By.TENANT
AUDITED = (
    "name",
    "description",
    "kind",
    "phase",
    "action",
    "detectors",
    "patterns",
    "words",
    "moderation_model",
    "moderation_threshold",
    "webhook_url",
    "secret_prefix",
    "deadline_ms",
    "fail_mode",
    "enabled",
)
# What a tenant may not set on a guardrail once made (the kind decides its other fields).
FIXED = ("kind", "account", "account_id")


class GuardrailRefused(PermissionError):
    """The writer may not do this (a tenant touching what the operator decided)."""


def _record(action: str, guardrail: Guardrail, *, actor: Actor | None, **change) -> None:
    audit.record(
        actor=actor,
        action=action,
        account_id=guardrail.account_id,
        target_type="guardrail",
        target_id=guardrail.pk,
        target_label=guardrail.name,
        **change,
    )


def _record_update(guardrail: Guardrail, before: dict, *, actor: Actor | None) -> None:
    audit.record_change(
        actor=actor,
        action="guardrail.update",
        account_id=guardrail.account_id,
        target_type="guardrail",
        target_id=guardrail.pk,
        target_label=guardrail.name,
        before=before,
        after=audited(guardrail, AUDITED),
    )


def _announce(account_ids: Iterable[int]) -> None:
    """Evict the accounts' cached principals on every replica once this commits."""
    for account_id in sorted(set(account_ids)):
        transaction.on_commit(partial(account_changed, account_id=account_id))


def accounts_using(guardrail: Guardrail) -> list[int]:
    """The accounts whose keys the guardrail applies to (or would, once attached)."""
    attached = GuardrailAttachment.objects.filter(guardrail=guardrail).values_list(
        "account_id", flat=True
    )
    return sorted({*attached, *([guardrail.account_id] if guardrail.account_id else [])})


def _lock(account: Account | None) -> None:
    # Counting against a bound is serialised per account (two creates cannot both pass).
    if account is not None:
        Account.objects.select_for_update().filter(pk=account.pk).first()


def seal_new_secret(guardrail: Guardrail) -> str:
    secret = new_secret()
    guardrail.secret_sealed, guardrail.secret_version = seal(secret, bound_to=guardrail.bound_to())
    guardrail.secret_prefix = secret[:12]
    guardrail.save(update_fields=["secret_sealed", "secret_version", "secret_prefix"])
    return secret


def guardrail_create(
    *, account: Account | None, actor: Actor | None = None, **fields
) -> tuple[Guardrail, str | None]:
    """Make a guardrail (the operator's with no account); return it and, for a webhook
    guardrail, its signing secret, which is never shown again."""
    guardrail = Guardrail(account=account, **fields)
    check_guardrail(guardrail)
    with transaction.atomic():
        _lock(account)
        owned = Guardrail.objects.filter(account=account)
        if account is not None and owned.count() >= GUARDRAILS_PER_ACCOUNT_MAX:
            raise GuardrailInvalid(
                "name", f"An account has at most {GUARDRAILS_PER_ACCOUNT_MAX} guardrails."
            )
        _refuse_taken_name(guardrail)
        guardrail.save()
        secret = None
        if guardrail.kind == Guardrail.Kind.WEBHOOK:
            secret = seal_new_secret(guardrail)
        _record("guardrail.create", guardrail, actor=actor, after=audited(guardrail, AUDITED))
        _announce(accounts_using(guardrail))
    return guardrail, secret


def _refuse_taken_name(guardrail: Guardrail) -> None:
    owner = (
        Q(account__isnull=True)
        if guardrail.account_id is None
        else Q(account_id=guardrail.account_id)
    )
    taken = Guardrail.objects.filter(owner, name=guardrail.name)
    if taken.exclude(pk=guardrail.pk).exists():
        raise GuardrailInvalid("name", f"A guardrail named {guardrail.name!r} exists already.")


def _refuse_tenant_change(guardrail: Guardrail, by: str) -> None:
    if by == OPERATOR:
        return
    if guardrail.account_id is None:
        raise GuardrailRefused("The operator's guardrails are changed by the operator only.")
    if guardrail.attachments.filter(attached_by=OPERATOR).exists():
        raise GuardrailRefused(
            "The operator attached this guardrail: only the operator can change or delete it."
        )


def guardrail_update(
    *, guardrail: Guardrail, by: str = TENANT, actor: Actor | None = None, **fields
) -> Guardrail:
    """Change a guardrail's fields (its kind and owner stay), checked as at creation."""
    _refuse_tenant_change(guardrail, by)
    for name in FIXED:
        if name in fields:
            raise GuardrailInvalid(name, f"A guardrail's {name} cannot change.")
    before = audited(guardrail, AUDITED)
    for name, value in fields.items():
        setattr(guardrail, name, value)
    check_guardrail(guardrail)
    with transaction.atomic():
        _refuse_taken_name(guardrail)
        guardrail.updated_at = timezone.now()
        guardrail.save()
        _record_update(guardrail, before, actor=actor)
        _announce(accounts_using(guardrail))
    return guardrail


def guardrail_recorded(
    *, guardrail: Guardrail, before: dict | None, actor: Actor | None = None
) -> None:
    """Record and announce a guardrail the admin saved itself (before None: created)."""
    if before is None:
        _record("guardrail.create", guardrail, actor=actor, after=audited(guardrail, AUDITED))
    else:
        _record_update(guardrail, before, actor=actor)
    _announce(accounts_using(guardrail))


def guardrail_delete(*, guardrail: Guardrail, by: str = TENANT, actor: Actor | None = None) -> None:
    """Delete a guardrail with its attachments."""
    _refuse_tenant_change(guardrail, by)
    with transaction.atomic():
        _announce(accounts_using(guardrail))
        _record("guardrail.delete", guardrail, actor=actor, before=audited(guardrail, AUDITED))
        guardrail.delete()


def guardrail_rotate_secret(*, guardrail: Guardrail, actor: Actor | None = None) -> str:
    """Give a webhook guardrail a new signing secret (returned once); the old one stops."""
    if guardrail.kind != Guardrail.Kind.WEBHOOK:
        raise GuardrailInvalid("kind", "Only a webhook guardrail has a secret.")
    before = {"secret_prefix": guardrail.secret_prefix}
    with transaction.atomic():
        secret = seal_new_secret(guardrail)
        after = {"secret_prefix": guardrail.secret_prefix}
        _record("guardrail.rotate", guardrail, actor=actor, before=before, after=after)
        _announce(accounts_using(guardrail))
    return secret


def attachment_audited(attachment: GuardrailAttachment) -> dict:
    return {
        "guardrail_id": attachment.guardrail_id,
        "guardrail": attachment.guardrail.name,
        "group_id": attachment.group_id,
        "api_key_id": attachment.api_key_id,
        "attached_by": attachment.attached_by,
    }


def _record_attachment(
    action: str, attachment: GuardrailAttachment, *, actor: Actor | None, **change
) -> None:
    audit.record(
        actor=actor,
        action=action,
        account_id=attachment.account_id,
        target_type="guardrail_attachment",
        target_id=attachment.pk,
        target_label=str(attachment),
        **change,
    )


def check_attachment(
    *, guardrail: Guardrail, account: Account, group: Group | None, api_key: ApiKey | None
) -> None:
    """Raise GuardrailInvalid unless the guardrail is offered to the account and the group or
    key (at most one) is the account's."""
    if guardrail.account_id not in (None, account.pk):
        raise GuardrailInvalid("guardrail", "A guardrail of this account or the operator's.")
    if group is not None and api_key is not None:
        raise GuardrailInvalid("api_key", "Attach to a group or a key, not both.")
    if group is not None and group.account_id != account.pk:
        raise GuardrailInvalid("group", "A group of this account.")
    if api_key is not None and api_key.group.account_id != account.pk:
        raise GuardrailInvalid("api_key", "A key of this account.")


def attachment_create(
    *,
    guardrail: Guardrail,
    account: Account,
    group: Group | None = None,
    api_key: ApiKey | None = None,
    by: str = TENANT,
    actor: Actor | None = None,
) -> GuardrailAttachment:
    """Apply a guardrail to the account (no group, no key), a group or a key. The operator
    attaching where the tenant had takes that attachment over (the tenant can no longer
    detach it)."""
    check_attachment(guardrail=guardrail, account=account, group=group, api_key=api_key)
    with transaction.atomic():
        _lock(account)
        existing = GuardrailAttachment.objects.filter(
            guardrail=guardrail, account=account, group=group, api_key=api_key
        ).first()
        if existing is not None:
            if by == OPERATOR and existing.attached_by == TENANT:
                existing.attached_by = OPERATOR
                existing.save(update_fields=["attached_by"])
                _record_attachment(
                    "guardrail.attach",
                    existing,
                    actor=actor,
                    before={"attached_by": TENANT},
                    after={"attached_by": OPERATOR},
                )
                _announce([account.pk])
                return existing
            raise GuardrailInvalid("guardrail", "This guardrail is attached there already.")
        if GuardrailAttachment.objects.filter(account=account).count() >= (
            ATTACHMENTS_PER_ACCOUNT_MAX
        ):
            raise GuardrailInvalid(
                "guardrail",
                f"An account has at most {ATTACHMENTS_PER_ACCOUNT_MAX} guardrail attachments.",
            )
        attachment = GuardrailAttachment.objects.create(
            guardrail=guardrail, account=account, group=group, api_key=api_key, attached_by=by
        )
        _record_attachment(
            "guardrail.attach", attachment, actor=actor, after=attachment_audited(attachment)
        )
        _announce([account.pk])
    return attachment


def attachment_delete(
    *, attachment: GuardrailAttachment, by: str = TENANT, actor: Actor | None = None
) -> None:
    """Detach a guardrail; a tenant cannot detach what the operator attached."""
    if by != OPERATOR and attachment.attached_by == OPERATOR:
        raise GuardrailRefused(
            "The operator attached this guardrail: only the operator can detach it."
        )
    with transaction.atomic():
        _record_attachment(
            "guardrail.detach", attachment, actor=actor, before=attachment_audited(attachment)
        )
        _announce([attachment.account_id])
        attachment.delete()


def attachment_recorded(
    *, attachment: GuardrailAttachment, before: dict | None, actor: Actor | None = None
) -> None:
    """Record and announce an attachment the admin saved itself (before None: created; else
    the operator took it over)."""
    if before is None:
        after = attachment_audited(attachment)
        _record_attachment("guardrail.attach", attachment, actor=actor, after=after)
    else:
        audit.record_change(
            actor=actor,
            action="guardrail.attach",
            account_id=attachment.account_id,
            target_type="guardrail_attachment",
            target_id=attachment.pk,
            target_label=str(attachment),
            before=before,
            after=attachment_audited(attachment),
        )
    _announce([attachment.account_id])
