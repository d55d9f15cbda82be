"""The audit trail: one append-only entry per control-plane change, chained per account.

Append-only four times over: the model refuses to update or delete a row (and its queryset
to update or delete rows), the database refuses it with a trigger (PostgreSQL and SQLite;
migration 0001), the role the application runs as may only insert and read it (core/db_roles.py),
and the hash chain (audit/chain.py) with its signed heads (audit/heads.py) shows what an owner
of the database removed or rewrote anyway.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import models

from audit.actors import Kind


class AppendOnly(Exception):
    """An attempt to change or remove an audit entry."""


class EntryQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnly("Audit entries are append-only: they are never updated.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly("Audit entries are append-only: they are never deleted.")


class AuditEntry(models.Model):
    # A plain id, not a foreign key: the trail outlives a deleted account (and a cascade
    # would try to delete its entries).
    account_id = models.BigIntegerField(null=True, blank=True, help_text="Empty: operator-wide.")
    seq = models.PositiveBigIntegerField(help_text="Place in the account's chain, from 1.")
    created_at = models.DateTimeField()
    actor_kind = models.CharField(max_length=10, choices=Kind.CHOICES)
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_label = models.CharField(max_length=200)
    remote_addr = models.CharField(max_length=45, blank=True, null=True)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=32)
    target_id = models.CharField(max_length=64, blank=True)
    target_label = models.CharField(max_length=200, blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    consent = models.TextField(blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    objects = EntryQuerySet.as_manager()

    class Meta:
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["account_id", "-id"], name="audit_account_newest"),
            models.Index(fields=["action", "-id"], name="audit_action_newest"),
            models.Index(fields=["created_at"], name="audit_created"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["account_id", "seq"], name="audit_seq_once"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("Audit entries are append-only: they are never updated.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly("Audit entries are append-only: they are never deleted.")

    def as_record(self) -> dict[str, Any]:
        """The entry as exported (JSON lines) and hashed (audit/chain.py)."""
        return {
            "id": self.pk,
            "account": self.account_id,
            "seq": self.seq,
            "created_at": iso(self.created_at),
            "actor_kind": self.actor_kind,
            "actor_id": self.actor_id,
            "actor_label": self.actor_label,
            "remote_addr": self.remote_addr,
            "action": self.action,
            "target_type": self.target_type,
            "target_id": self.target_id,
            "target_label": self.target_label,
            "before": self.before,
            "after": self.after,
            "consent": self.consent,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


class SignedHead(models.Model):
    """A chain's head (its last seq and hash) signed with the operator's key at a moment: the
    audit trail's and the receipts' (audit/heads.py). Append-only, and handed to the tenant:
    a head kept outside the database shows any later rewrite, cut or rollback of what it
    covers, whoever holds the database."""

    class Chain(models.TextChoices):
        AUDIT = "audit"
        RECEIPTS = "receipts"

    chain = models.CharField(max_length=8, choices=Chain.choices)
    account_id = models.BigIntegerField(help_text="The account's id; 0: operator-wide.")
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    signed_at = models.DateTimeField()
    key_id = models.CharField(max_length=32)
    signature = models.CharField(max_length=128)

    objects = EntryQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["chain", "account_id", "-seq"], name="signed_head_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.chain} head of {self.account_id} at seq {self.seq}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("Signed heads are append-only: they are never updated.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly("Signed heads are append-only: they are never deleted.")


def iso(moment: datetime) -> str:
    """A stored time as the chain hashes it: UTC, ISO 8601, microseconds."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")
