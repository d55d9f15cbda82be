"""Tenants: accounts, their members, budget groups and the virtual keys clients present."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from accounts.model_access import BadEntry, clean_entries, name_problem
from accounts.periods import valid_time_zone

DEFAULT_ALERT_PCTS = (50, 80, 100)


def default_alert_pcts() -> list[int]:
    return list(DEFAULT_ALERT_PCTS)


class CacheMode(models.TextChoices):
    """Whether a group's or key's answers are cached (gateway/cache/policy.py)."""

    OFF = "off", "Off: nothing cached"
    ON_REQUEST = "on_request", "On request: only requests that ask"
    ALWAYS = "always", "Always, for the TTL set here"


class CacheScope(models.TextChoices):
    """Who shares a cached answer: never wider than the account."""

    ACCOUNT = "account", "The account"
    GROUP = "group", "The group"
    KEY = "key", "The key"
    CALLER = "caller", "The end caller (its label)"


DEFAULT_CACHE_TTL_S = 3600


def validate_time_zone(value: str) -> None:
    if not valid_time_zone(value):
        raise ValidationError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Berlin).")


def validate_alert_pcts(value) -> None:
    if not isinstance(value, list) or not all(
        type(pct) is int and 1 <= pct <= 100 for pct in value
    ):
        raise ValidationError("Alert thresholds are a list of whole percents from 1 to 100.")
    if len(set(value)) != len(value):
        raise ValidationError("Alert thresholds are listed once each.")


DIRECTORY_GROUP_MAX = 200  # characters of a directory group's name


def validate_directory_roles(value) -> None:
    if not isinstance(value, dict) or not all(
        isinstance(name, str) and 0 < len(name) <= DIRECTORY_GROUP_MAX for name in value
    ):
        raise ValidationError("Directory roles map group names (1-200 characters) to roles.")
    roles = set(Membership.Role.values)
    if not all(role in roles for role in value.values()):
        raise ValidationError(f"A directory group maps to one of: {', '.join(sorted(roles))}.")


class Period(models.TextChoices):
    """A budget's period: its spent is that of the current day or month, then resets."""

    NONE = "none", "None (the budget never resets)"
    DAILY = "daily", "Daily (resets at midnight in the account's time zone)"
    MONTHLY = "monthly", "Monthly (resets on the 1st, midnight in the account's time zone)"


class Account(models.Model):
    class BillingMode(models.TextChoices):
        PREPAID = "prepaid", "Prepaid (wallet escrow)"
        INVOICED = "invoiced", "Invoiced (bounded by budgets)"

    name = models.CharField(max_length=200, unique=True)
    billing_mode = models.CharField(
        max_length=16, choices=BillingMode.choices, default=BillingMode.PREPAID
    )
    # Customer bandwidth price and provider-cost markup; groups get floor(price / markup).
    bandwidth_price_micro_per_gb = models.BigIntegerField(default=0)
    markup_bp = models.PositiveIntegerField(
        "markup (basis points)",
        default=10_000,
        help_text="Provider-cost markup in basis points: 12500 = 1.25x.",
    )
    # Budget periods reset at midnight here; an IANA name.
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    # Spend alerts fire once per period when spent reaches each percent of a budget.
    budget_alert_pcts = models.JSONField(
        "budget alert percents",
        default=default_alert_pcts,
        blank=True,
        validators=[validate_alert_pcts],
        help_text="Percents of a budget that raise an alert, e.g. [50, 80, 100].",
    )
    # Set by an operator: every key of the account is refused (LM-1004) until resumed.
    suspended_at = models.DateTimeField(null=True, blank=True, editable=False)
    suspended_reason = models.CharField(max_length=200, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    # The company directory's groups (an SSO groups claim, SCIM Groups) and the role each
    # gives a member here (accounts/directory.py).
    directory_roles = models.JSONField(
        default=dict,
        db_default={},
        blank=True,
        validators=[validate_directory_roles],
        help_text='Directory group -> role, e.g. {"eng-leads": "admin", "eng": "viewer"}.',
    )
    # Set by an operator: the account's traces carry prompt and answer text (gateway tracing).
    # Off, a trace holds sizes, models, money and timings, never content.
    trace_content = models.BooleanField(
        "trace content",
        default=False,
        db_default=False,
        help_text="Export prompts and answers in this account's traces (off: never).",
    )

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        VIEWER = "viewer"

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "user"], name="membership_once")]

    def __str__(self) -> str:
        return f"{self.user} in {self.account} ({self.role})"


class PeriodSpend:
    """What a budgeted row (group or key) has spent in its current budget period."""

    spent_micro: int
    period_ends_at: datetime | None

    def period_spent_micro(self, now: datetime | None = None) -> int:
        """Return what counts against the budget now: spent_micro, or 0 once the period
        ended and before the ledger rolled it (the hold statements read it the same way)."""
        if self.period_ends_at is not None and self.period_ends_at <= (now or timezone.now()):
            return 0
        return self.spent_micro


class Group(PeriodSpend, models.Model):
    """A budget group: money counters and limits shared by its keys."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="groups")
    name = models.CharField(max_length=200)
    budget_max_micro = models.BigIntegerField(null=True, blank=True)
    spent_micro = models.BigIntegerField(default=0)
    reserved_micro = models.BigIntegerField(default=0)
    settled_micro = models.BigIntegerField(default=0)
    # Measured provider cost above a hold that the wallet could not cover: stated here, never
    # in spent or settled (billing.ledger moves it in the statement that charges them).
    uncollected_micro = models.BigIntegerField(default=0, db_default=0, editable=False)
    bandwidth_micro_usd_per_gb = models.BigIntegerField(default=0)
    rpm_limit = models.PositiveIntegerField(null=True, blank=True)
    tpm_limit = models.PositiveIntegerField(null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    # Limits per end caller (keyed by the caller label), each caller counted on its own.
    caller_rpm_limit = models.PositiveIntegerField(null=True, blank=True)
    caller_tpm_limit = models.PositiveIntegerField(null=True, blank=True)
    caller_budget_max_micro = models.BigIntegerField(null=True, blank=True)
    # Web units (pages, rendered pages, queries) the group may use per UTC day; empty: no cap.
    web_units_per_day = models.PositiveIntegerField(null=True, blank=True)
    # Tags every request of the group's keys carries after its own and its key's (core/tags.py).
    default_tags = models.JSONField(default=list, db_default=[], blank=True)
    # With a period, spent_micro is the current period's spend (billing/ledger/periods.py).
    budget_period = models.CharField(max_length=8, choices=Period.choices, default=Period.NONE)
    period_starts_at = models.DateTimeField(null=True, blank=True, editable=False)
    period_ends_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    # The response cache (gateway/cache/): the group's rule, which its keys may override.
    cache_mode = models.CharField(
        max_length=12,
        choices=CacheMode.choices,
        default=CacheMode.ON_REQUEST,
        db_default=CacheMode.ON_REQUEST,
    )
    cache_ttl_s = models.PositiveIntegerField(
        default=DEFAULT_CACHE_TTL_S,
        db_default=DEFAULT_CACHE_TTL_S,
        help_text="How long answers are kept under 'always' (the model's maximum bounds it).",
    )
    cache_scope = models.CharField(
        max_length=8,
        choices=CacheScope.choices,
        default=CacheScope.ACCOUNT,
        db_default=CacheScope.ACCOUNT,
    )

    class Meta:
        indexes = [models.Index(fields=["period_ends_at"], name="group_period_ends")]
        constraints = [
            models.UniqueConstraint(fields=["account", "name"], name="group_name_once"),
            models.CheckConstraint(
                condition=models.Q(reserved_micro__gte=0), name="group_reserved_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account}/{self.name}"


class ApiKey(PeriodSpend, models.Model):
    """A virtual key. Only its SHA-256 is stored; the secret is shown once at creation."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, help_text="Shown to tell keys apart.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    # After a rotation (accounts/rotation.py) the replaced secret's hash, valid until then.
    previous_hash = models.CharField(
        max_length=64, unique=True, null=True, blank=True, editable=False
    )
    previous_valid_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    allowed_models = models.JSONField(
        default=list, blank=True, help_text="Model names this key may use; empty means all."
    )
    # Tags every request of the key carries after its own (core/tags.py).
    default_tags = models.JSONField(default=list, db_default=[], blank=True)
    budget_max_micro = models.BigIntegerField(null=True, blank=True)
    spent_micro = models.BigIntegerField(default=0)
    reserved_micro = models.BigIntegerField(default=0)
    # As the group's: what the wallet could not cover, never in spent (lifetime, not per period).
    uncollected_micro = models.BigIntegerField(default=0, db_default=0, editable=False)
    rpm_limit = models.PositiveIntegerField(null=True, blank=True)
    tpm_limit = models.PositiveIntegerField(null=True, blank=True)
    budget_period = models.CharField(max_length=8, choices=Period.choices, default=Period.NONE)
    period_starts_at = models.DateTimeField(null=True, blank=True, editable=False)
    period_ends_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The response cache: empty (null) fields follow the group's.
    cache_mode = models.CharField(
        max_length=12, choices=CacheMode.choices, blank=True, default="", db_default=""
    )
    cache_ttl_s = models.PositiveIntegerField(null=True, blank=True)
    cache_scope = models.CharField(
        max_length=8, choices=CacheScope.choices, blank=True, default="", db_default=""
    )

    class Meta:
        verbose_name = "API key"
        indexes = [models.Index(fields=["period_ends_at"], name="key_period_ends")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(reserved_micro__gte=0), name="key_reserved_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or self.group})"

    def is_usable(self, now=None) -> bool:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > now

    def eviction(self) -> dict:
        """Return the bus message that evicts this key: its secret's hash and, after a
        rotation, the one still in grace (gateway/auth.py caches each secret on its own)."""
        hashes = [self.key_hash, *([self.previous_hash] if self.previous_hash else [])]
        return {"key_hash": self.key_hash, "key_hashes": hashes}


class TenantToken(models.Model):
    """A tenant API credential (`Authorization: Token ...`). Stored hashed; buys no tokens."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_tokens"
    )
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    # After a rotation (accounts/rotation.py) the replaced token's hash, valid until then.
    previous_hash = models.CharField(
        max_length=64, unique=True, null=True, blank=True, editable=False
    )
    previous_valid_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "tenant API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


def validate_access_entries(value) -> None:
    try:
        clean_entries(value)
    except BadEntry as exc:
        raise ValidationError(str(exc)) from None


def validate_access_group_name(value: str) -> None:
    problem = name_problem(value)
    if problem:
        raise ValidationError(problem[0].upper() + problem[1:] + ".")


class AccessGroup(models.Model):
    """A named set of model names and patterns (accounts/model_access.py says how they
    match and combine). Assigned to a key, it adds to what the key may call; assigned to a
    budget group, it bounds every key of the group."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="access_groups")
    name = models.CharField(max_length=64, validators=[validate_access_group_name])
    description = models.CharField(max_length=200, blank=True)
    entries = models.JSONField(
        default=list,
        validators=[validate_access_entries],
        help_text='Model names and patterns, e.g. ["gpt-4o-mini", "claude-*", "anthropic/*"].',
    )
    keys = models.ManyToManyField(ApiKey, related_name="access_groups", blank=True)
    groups = models.ManyToManyField(Group, related_name="access_groups", blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "name"], name="access_group_name_once")
        ]

    def __str__(self) -> str:
        return f"{self.account}/{self.name}"
