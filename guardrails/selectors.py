"""Reads of guardrails: the ones that apply to one key, as plain values for the gateway."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

from core.sealing import unseal
from guardrails.models import Guardrail, GuardrailAttachment


@dataclass(frozen=True, slots=True)
class GuardrailSpec:
    """One guardrail as the gateway runs it (the fields its kind does not use are empty)."""

    id: int
    name: str
    kind: str  # detectors | custom | moderation | webhook
    phase: str  # input | output | both
    action: str  # block | redact | flag
    detectors: tuple[str, ...]
    patterns: tuple[str, ...]
    words: tuple[str, ...]
    moderation_model: str
    moderation_threshold: float | None  # None: the moderation answer's own `flagged`
    webhook_url: str
    webhook_secret: str  # unsealed, to sign each call; "" for other kinds
    deadline_ms: int
    fail_mode: str  # open | closed
    updated_at: datetime
    # No account: the operator's, whose webhook URL is called as configured (else checked).
    operators: bool = False


def guardrails_for(
    account_id: int, group_id: int | None = None, api_key_id: int | None = None
) -> tuple[GuardrailSpec, ...]:
    """Return the enabled guardrails attached to the account itself, to the group or to the
    key, each once, the operator's first, then by id (a stable order)."""
    where = Q(group__isnull=True, api_key__isnull=True)
    if group_id is not None:
        where |= Q(group_id=group_id)
    if api_key_id is not None:
        where |= Q(api_key_id=api_key_id)
    attached = GuardrailAttachment.objects.filter(where, account_id=account_id).values(
        "guardrail_id"
    )
    rows = Guardrail.objects.filter(
        Q(account__isnull=True) | Q(account_id=account_id), pk__in=attached, enabled=True
    )
    ordered = sorted(rows, key=lambda row: (row.account_id is not None, row.pk))
    return tuple(spec_of(row) for row in ordered)


def spec_of(row: Guardrail) -> GuardrailSpec:
    secret = ""
    if row.kind == Guardrail.Kind.WEBHOOK and row.secret_version:
        secret = unseal(
            bytes(row.secret_sealed), version=row.secret_version, bound_to=row.bound_to()
        )
    return GuardrailSpec(
        id=row.pk,
        name=row.name,
        kind=row.kind,
        phase=row.phase,
        action=row.action,
        detectors=tuple(row.detectors),
        patterns=tuple(row.patterns),
        words=tuple(row.words),
        moderation_model=row.moderation_model,
        moderation_threshold=row.moderation_threshold,
        webhook_url=row.webhook_url,
        webhook_secret=secret,
        deadline_ms=row.deadline_ms,
        fail_mode=row.fail_mode,
        updated_at=row.updated_at,
        operators=row.account_id is None,
    )


def guardrails_visible(account_ids: QuerySet | list[int]) -> QuerySet[Guardrail]:
    """The guardrails the accounts see: their own and the operator's."""
    return Guardrail.objects.filter(Q(account__isnull=True) | Q(account_id__in=account_ids))
