"""Guardrail policies and where they apply.

A guardrail is the operator's (no account: offered to every account) or one account's. It
runs on the request's input (before any vendor call), its output, or both, and blocks,
redacts or flags what it finds. Attachments say where it applies: an account, one of its
groups or one of its keys. What the operator attached, a tenant can neither detach nor
change (guardrails/services.py refuses it): a client cannot turn a guardrail off.
guardrails/rules.py says which fields each kind takes; guardrails/selectors.py resolves the
guardrails of one key for the gateway.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

GUARDRAILS_PER_ACCOUNT_MAX = 50
ATTACHMENTS_PER_ACCOUNT_MAX = 100
DEADLINE_MS_DEFAULT = 2000
DEADLINE_MS_MIN = 100
DEADLINE_MS_MAX = 10_000
NAME_MAX_CHARS = 64


class Guardrail(models.Model):
    """One check: which kind, on which phase, doing what with a finding."""

    class Kind(models.TextChoices):
        DETECTORS = "detectors", "Built-in detectors"
        CUSTOM = "custom", "Own patterns and words (RE2)"
        MODERATION = "moderation", "A moderation model"
        WEBHOOK = "webhook", "An HTTP endpoint"

    class Phase(models.TextChoices):
        INPUT = "input", "The request, before any vendor call"
        OUTPUT = "output", "The answer"
        BOTH = "both", "Both"

    class Action(models.TextChoices):
        BLOCK = "block"
        REDACT = "redact"
        FLAG = "flag"

    class FailMode(models.TextChoices):
        OPEN = "open", "Let the request through"
        CLOSED = "closed", "Block the request"

    # None: the operator's, offered to every account.
    account = models.ForeignKey(
        "accounts.Account", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    name = models.SlugField(max_length=NAME_MAX_CHARS)
    description = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    phase = models.CharField(max_length=8, choices=Phase.choices, default=Phase.BOTH)
    action = models.CharField(max_length=8, choices=Action.choices, default=Action.BLOCK)
    # kind=detectors: names from guardrails.detectors.BUILTIN_KINDS.
    detectors = models.JSONField(default=list, blank=True)
    # kind=custom: RE2 patterns and whole words (guardrails.custom.compile_custom).
    patterns = models.JSONField(default=list, blank=True)
    words = models.JSONField(default=list, blank=True)
    # kind=moderation: a model alias the gateway routes (an OpenAI /v1/moderations shape), and
    # the category score that counts as a finding (None: the model's own `flagged`).
    moderation_model = models.CharField(max_length=200, blank=True)
    moderation_threshold = models.FloatField(null=True, blank=True)
    # kind=webhook: the endpoint, and its signing secret (shown once, sealed to sign with).
    webhook_url = models.URLField(max_length=500, blank=True)
    secret_prefix = models.CharField(max_length=16, blank=True, editable=False)
    secret_sealed = models.BinaryField(default=b"", blank=True, editable=False)
    secret_version = models.CharField(max_length=16, blank=True, editable=False)
    # Moderation and webhook: how long the call may take, and what its failure means.
    deadline_ms = models.PositiveIntegerField(default=DEADLINE_MS_DEFAULT)
    fail_mode = models.CharField(max_length=8, choices=FailMode.choices, default=FailMode.OPEN)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "name"],
                condition=Q(account__isnull=False),
                name="guardrail_name_per_account",
            ),
            models.UniqueConstraint(
                fields=["name"], condition=Q(account__isnull=True), name="guardrail_operator_name"
            ),
            models.CheckConstraint(
                condition=Q(deadline_ms__gte=DEADLINE_MS_MIN, deadline_ms__lte=DEADLINE_MS_MAX),
                name="guardrail_deadline_bounded",
            ),
            models.CheckConstraint(
                condition=~Q(action="redact") | Q(kind__in=["detectors", "custom"]),
                name="guardrail_redacts_by_spans",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def public_id(self) -> str:
        return f"grd_{self.pk}"

    @property
    def is_operators(self) -> bool:
        return self.account_id is None

    def bound_to(self) -> str:
        return f"guardrail_webhook:{self.pk}"


class GuardrailAttachment(models.Model):
    """A guardrail applied to an account (no group, no key), one of its groups or one of its
    keys, by the operator or the tenant."""

    class By(models.TextChoices):
        OPERATOR = "operator"
        TENANT = "tenant"

    guardrail = models.ForeignKey(Guardrail, on_delete=models.CASCADE, related_name="attachments")
    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="+")
    group = models.ForeignKey(
        "accounts.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    attached_by = models.CharField(max_length=8, choices=By.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["guardrail", "account", "group", "api_key"],
                nulls_distinct=False,
                name="guardrail_attached_once",
            ),
            models.CheckConstraint(
                condition=Q(group__isnull=True) | Q(api_key__isnull=True),
                name="guardrail_attached_at_one_level",
            ),
        ]
        indexes = [models.Index(fields=["account", "guardrail"], name="guardrail_attachment_acct")]

    def __str__(self) -> str:
        return f"{self.guardrail} on {self.level}"

    @property
    def public_id(self) -> str:
        return f"gatt_{self.pk}"

    @property
    def level(self) -> str:
        if self.api_key_id is not None:
            return f"key {self.api_key_id}"
        if self.group_id is not None:
            return f"group {self.group_id}"
        return f"account {self.account_id}"
