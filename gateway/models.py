"""The gateway's own table: idempotency records of the request path."""

from __future__ import annotations

from django.db import models


class IdempotencyRecord(models.Model):
    """One `Idempotency-Key` of an account: who runs it, and the answer to replay (24 h).

    Written and read by raw SQL on the request path (gateway/idempotency.py); the model is
    here for the schema and the admin.
    """

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done (replayable)"
        TOO_LARGE = "too_large", "Done (answer too large to store)"

    account = models.ForeignKey(
        "accounts.Account", on_delete=models.CASCADE, db_index=False, related_name="+"
    )
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of route and raw body.")
    state = models.CharField(max_length=16, choices=State.choices)
    request_id = models.CharField(max_length=64, help_text="The minted id of the request.")
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    headers = models.TextField(blank=True, help_text="JSON [[name, value], ...] to replay.")
    body = models.BinaryField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "gateway_idempotency"
        constraints = [
            models.UniqueConstraint(fields=["account", "key"], name="idempotency_key_per_account")
        ]

    def __str__(self) -> str:
        return f"{self.account_id}/{self.key} ({self.state})"
