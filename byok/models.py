"""Team provider keys (BYOK): a group's own vendor keys, sealed at rest, in pools per provider."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

MAX_KEYS_PER_POOL = 10
LABEL_MAX_CHARS = 64


class KeyPool(models.Model):
    """All team keys of (group, provider) plus the flag allowing platform fallback."""

    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE, related_name="pools")
    provider = models.CharField(max_length=64, help_text="Provider profile name.")
    fallback = models.BooleanField(default=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["group", "provider"], name="pool_once_per_provider")
        ]

    def __str__(self) -> str:
        return f"{self.group} · {self.provider}"


class TeamKey(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        FAILING = "failing"

    pool = models.ForeignKey(KeyPool, on_delete=models.CASCADE, related_name="keys")
    label = models.CharField(max_length=LABEL_MAX_CHARS)
    sealed = models.BinaryField(editable=False)
    seal_version = models.CharField(max_length=16, editable=False)
    last4 = models.CharField(max_length=4, editable=False)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    benched_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.label} (…{self.last4})"
