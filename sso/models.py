"""Single sign-on: each account's OpenID provider, and who a provider's identity is here.

A person is (issuer, subject) at their provider, never an email address: the email is kept
for display and follows the provider's changes, but no sign-in is ever matched by it.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from accounts.models import Account, Membership
from core.sealing import seal, unseal

DOMAIN_MAX = 253


def validate_domains(value) -> None:
    if not isinstance(value, list) or not all(
        isinstance(d, str) and 0 < len(d) <= DOMAIN_MAX and "@" not in d and d == d.lower()
        for d in value
    ):
        raise ValidationError('Email domains are a list of lower-case names, e.g. ["example.com"].')


class Provider(models.Model):
    """An account's OpenID provider (one per account) and its sign-in rules."""

    class JitRole(models.TextChoices):
        # Never owner: ownership comes from the groups claim's mapping or an owner's hand.
        ADMIN = Membership.Role.ADMIN.value, "admin"
        VIEWER = Membership.Role.VIEWER.value, "viewer"

    account = models.OneToOneField(Account, on_delete=models.CASCADE, related_name="sso_provider")
    issuer = models.URLField(max_length=500, help_text="e.g. https://example.okta.com")
    client_id = models.CharField(max_length=255)
    client_secret_sealed = models.BinaryField(default=b"", editable=False)
    client_secret_version = models.CharField(max_length=16, blank=True, editable=False)
    display_name = models.CharField(
        max_length=60, default="single sign-on", help_text='The button says "Sign in with …".'
    )
    jit_domains = models.JSONField(
        "just-in-time email domains",
        default=list,
        blank=True,
        validators=[validate_domains],
        help_text="A verified email in one of these domains joins the account on first sign-in.",
    )
    jit_role = models.CharField(
        "just-in-time role", max_length=8, choices=JitRole.choices, default=JitRole.VIEWER
    )
    groups_claim = models.CharField(max_length=100, default="groups")
    enabled = models.BooleanField(default=False)
    password_sign_in = models.BooleanField(
        default=True, help_text="Off: the account's members sign in with single sign-on only."
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "SSO provider"

    def __str__(self) -> str:
        return f"{self.account}: {self.display_name} ({self.issuer})"

    @property
    def bound_to(self) -> str:
        return f"sso-provider:{self.account_id}"

    def set_client_secret(self, secret: str) -> None:
        self.client_secret_sealed, self.client_secret_version = seal(secret, bound_to=self.bound_to)

    def client_secret(self) -> str:
        if not self.client_secret_version:
            return ""
        return unseal(
            bytes(self.client_secret_sealed),
            version=self.client_secret_version,
            bound_to=self.bound_to,
        )


class IdentityLink(models.Model):
    """One person at one provider (issuer, subject) is one user here, for good."""

    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identity_links"
    )
    email = models.CharField(max_length=254, blank=True, help_text="As last seen; never matched.")
    created_at = models.DateTimeField(default=timezone.now)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "SSO identity"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_once"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} -> {self.user}"
