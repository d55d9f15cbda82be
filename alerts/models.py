"""Tenant alerts: rules on budgets and the wallet, the thresholds they fired (once each per
period), the account's webhooks and every delivery with its tries (alerts/evaluate.py says
when a rule fires, alerts/delivery.py how it is sent)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from accounts.models import DEFAULT_ALERT_PCTS

RULES_PER_ACCOUNT_MAX = 100
WEBHOOKS_PER_ACCOUNT_MAX = 10


def default_pcts() -> list[int]:
    return list(DEFAULT_ALERT_PCTS)


class AlertRule(models.Model):
    """What to watch and when it fires: percents of a budget (or an amount spent) for an
    account's groups together, a group, a key or a tag; or the wallet's balance below an
    amount."""

    class Scope(models.TextChoices):
        ACCOUNT = "account", "The account (its groups together)"
        GROUP = "group", "A group"
        KEY = "key", "A key"
        TAG = "tag", "A request tag"
        WALLET = "wallet", "The wallet's balance"

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=200, blank=True)
    scope = models.CharField(max_length=8, choices=Scope.choices)
    group = models.ForeignKey(
        "accounts.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    tag = models.CharField(max_length=64, blank=True)
    # Percents of the budget; ignored when amount_micro is set.
    threshold_pcts = models.JSONField(default=default_pcts, blank=True)
    # Spend scopes: fire when spent reaches this. The wallet: fire when the balance is below it.
    amount_micro = models.BigIntegerField(null=True, blank=True)
    emails = models.JSONField(default=list, blank=True, help_text="Addresses to email.")
    email_managers = models.BooleanField(
        default=False, help_text="Also email the account's owners and admins."
    )
    enabled = models.BooleanField(default=True)
    # The wallet rule's state: armed until it fires, re-armed when the balance is back up.
    wallet_armed = models.BooleanField(default=True, editable=False)
    wallet_crossings = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["enabled", "account"], name="alert_rule_enabled")]

    def __str__(self) -> str:
        return self.name or f"{self.scope} rule {self.pk}"

    @property
    def public_id(self) -> str:
        return f"arule_{self.pk}"


class AlertFiring(models.Model):
    """A rule's threshold reached in one period (once: the unique constraint says so)."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="firings")
    # The budget period's key ("2026-12", "2026-12-06", a period's start, "all"), or the
    # wallet's crossing number.
    period = models.CharField(max_length=40)
    # "pct:80" or "amount:5000000" (a wallet's: "below:5000000").
    threshold = models.CharField(max_length=40)
    value_micro = models.BigIntegerField(help_text="Spent, or the wallet's balance.")
    limit_micro = models.BigIntegerField(
        null=True, blank=True, help_text="The budget, or the amount of the threshold."
    )
    payload = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "period", "threshold"], name="alert_firing_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule} {self.threshold} in {self.period}"

    @property
    def public_id(self) -> str:
        return f"alert_{self.pk}"


class AlertWebhook(models.Model):
    """A tenant's endpoint: every firing of the account's rules is POSTed here, signed with
    the secret shown once at creation (sealed at rest: signing needs it)."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
    secret_prefix = models.CharField(max_length=16, editable=False)
    secret_sealed = models.BinaryField(editable=False)
    secret_version = models.CharField(max_length=16, editable=False)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.url

    def bound_to(self) -> str:
        return f"alert_webhook:{self.pk}"


class AlertDelivery(models.Model):
    """One firing (or a test) sent to one channel: a webhook, the rule's email list, or the
    operator's sink (core/sinks.py), which receives every firing and which tenants never see."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook"
        EMAIL = "email"
        SINK = "sink"

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="+")
    firing = models.ForeignKey(
        AlertFiring, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    webhook = models.ForeignKey(
        AlertWebhook, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    channel = models.CharField(max_length=8, choices=Channel.choices)
    recipients = models.JSONField(default=list, blank=True)
    event_id = models.CharField(max_length=40)
    payload = models.JSONField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    # Sent when this is past; a sender claims the delivery by moving it (a lease).
    next_attempt_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "alert deliveries"
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="alert_delivery_due"),
            models.Index(fields=["account", "-created_at"], name="alert_delivery_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} by {self.channel} ({self.state})"


class AlertAttempt(models.Model):
    """One try of a delivery: what the receiver answered, or why it could not."""

    delivery = models.ForeignKey(AlertDelivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveSmallIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=200, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"try {self.number} of {self.delivery_id}"
