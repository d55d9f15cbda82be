"""The tenant API's shapes for guardrails and attachments. Ids are public ids (`grd_12`,
`gatt_3`); an operator's guardrail shows `"owner": "operator"` and never its webhook's URL."""

from __future__ import annotations

import re

from django.db import models
from rest_framework import serializers

from accounts.api.fields import id_of
from accounts.models import Account, ApiKey, Group
from guardrails.custom import MAX_WORDS
from guardrails.models import NAME_MAX_CHARS, Guardrail, GuardrailAttachment

GUARDRAIL_ID = re.compile(r"grd_([1-9][0-9]{0,17})")
ATTACHMENT_ID = re.compile(r"gatt_([1-9][0-9]{0,17})")
TEXT_MAX_CHARS = 10_000  # one pattern or word; compile_custom's own limits are far lower


class TenantKind(models.TextChoices):
    """The kinds an account defines (the operator's detectors and moderation are not)."""

    CUSTOM = Guardrail.Kind.CUSTOM.value, Guardrail.Kind.CUSTOM.label
    WEBHOOK = Guardrail.Kind.WEBHOOK.value, Guardrail.Kind.WEBHOOK.label


def pk_of(public_id: str, rule: re.Pattern[str]) -> int | None:
    """The row id inside a public id, or None for a text no row can have."""
    found = rule.fullmatch(public_id)
    return int(found.group(1)) if found else None


def _texts(**kwargs) -> serializers.ListField:
    child = serializers.CharField(max_length=TEXT_MAX_CHARS, trim_whitespace=False)
    return serializers.ListField(child=child, max_length=MAX_WORDS + 1, required=False, **kwargs)


class GuardrailOut(serializers.Serializer):
    id = serializers.CharField(source="public_id", help_text="grd_<n>")
    owner = serializers.SerializerMethodField(help_text="`account` or `operator` (read-only).")
    account = serializers.IntegerField(source="account_id", allow_null=True)
    name = serializers.CharField()
    description = serializers.CharField()
    kind = serializers.ChoiceField(choices=Guardrail.Kind.choices)
    phase = serializers.ChoiceField(choices=Guardrail.Phase.choices)
    action = serializers.ChoiceField(choices=Guardrail.Action.choices)
    detectors = serializers.ListField(child=serializers.CharField())
    patterns = serializers.ListField(child=serializers.CharField())
    words = serializers.ListField(child=serializers.CharField())
    moderation_model = serializers.CharField()
    moderation_threshold = serializers.FloatField(allow_null=True)
    webhook_url = serializers.SerializerMethodField()
    secret_prefix = serializers.SerializerMethodField()
    deadline_ms = serializers.IntegerField()
    fail_mode = serializers.ChoiceField(choices=Guardrail.FailMode.choices)
    enabled = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_owner(self, row: Guardrail) -> str:
        return "operator" if row.is_operators else "account"

    def get_webhook_url(self, row: Guardrail) -> str:
        return "" if row.is_operators else row.webhook_url

    def get_secret_prefix(self, row: Guardrail) -> str:
        return "" if row.is_operators else row.secret_prefix


class GuardrailPage(serializers.Serializer):
    results = GuardrailOut(many=True)


class GuardrailCreatedOut(GuardrailOut):
    secret = serializers.CharField(
        required=False, help_text="A webhook guardrail's signing secret: shown this once."
    )


class GuardrailUpdateIn(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX_CHARS, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    phase = serializers.ChoiceField(choices=Guardrail.Phase.choices, required=False)
    action = serializers.ChoiceField(choices=Guardrail.Action.choices, required=False)
    patterns = _texts(help_text="custom: RE2 patterns (at most 20, 500 characters each).")
    words = _texts(help_text="custom: words matched whole, ignoring case (at most 1000).")
    webhook_url = serializers.URLField(max_length=500, required=False)
    deadline_ms = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    fail_mode = serializers.ChoiceField(choices=Guardrail.FailMode.choices, required=False)
    enabled = serializers.BooleanField(required=False)


class GuardrailIn(GuardrailUpdateIn):
    account = id_of(Account, required=False, help_text="Its account; else the caller's first.")
    name = serializers.CharField(max_length=NAME_MAX_CHARS)
    kind = serializers.ChoiceField(
        choices=TenantKind.choices,
        help_text="An account defines custom and webhook guardrails.",
    )


class AttachmentOut(serializers.Serializer):
    id = serializers.CharField(source="public_id", help_text="gatt_<n>")
    guardrail = serializers.CharField(source="guardrail.public_id")
    guardrail_name = serializers.CharField(source="guardrail.name")
    account = serializers.IntegerField(source="account_id")
    group = serializers.IntegerField(source="group_id", allow_null=True)
    api_key = serializers.IntegerField(source="api_key_id", allow_null=True)
    attached_by = serializers.ChoiceField(choices=GuardrailAttachment.By.choices)
    created_at = serializers.DateTimeField()


class AttachmentPage(serializers.Serializer):
    results = AttachmentOut(many=True)


class AttachmentIn(serializers.Serializer):
    guardrail = serializers.CharField(max_length=24, help_text="grd_<n>: own or operator's.")
    account = id_of(Account, required=False, help_text="Its account; else the caller's first.")
    group = id_of(Group, required=False, help_text="A group of the account (or a key, or none).")
    api_key = id_of(ApiKey, required=False, help_text="A key of the account.")
