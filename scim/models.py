"""SCIM 2.0 provisioning (RFC 7643/7644): the account's token, its directory's users and
groups, and the sign-in sessions a deprovisioning ends."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from accounts.models import DIRECTORY_GROUP_MAX, Account


class ScimToken(models.Model):
    """The account's one SCIM bearer token. Only hashes are stored; the secret is shown once.

    Rotated through accounts/rotation.py: the previous secret keeps working until
    previous_valid_until, so a directory's settings can be updated without a gap."""

    account = models.OneToOneField(Account, on_delete=models.CASCADE, related_name="scim_token")
    prefix = models.CharField(max_length=16, help_text="Shown to tell tokens apart.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    previous_hash = models.CharField(max_length=64, unique=True, null=True, editable=False)
    previous_valid_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "SCIM token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.account})"


class ScimUser(models.Model):
    """A person the account's directory provisioned: the SCIM attributes Django's user has no
    field for, and whether the directory holds them active.

    An active user has a Membership in the account; an inactive one keeps this row (the
    directory may activate them again) and no membership. The SSO sign-in links an identity
    whose OIDC `sub` equals external_id to this user (sso/identities.py)."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="scim_users")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scim_users"
    )
    external_id = models.CharField(max_length=255, blank=True, db_index=True)
    # None: the directory did not say (or removed the attribute); counts as active.
    active = models.BooleanField(null=True, default=True)
    # name, displayName and emails as the directory sent them (only the sub-attributes our
    # schema lists), so a read answers what was written.
    attributes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "SCIM user"
        constraints = [models.UniqueConstraint(fields=["account", "user"], name="scim_user_once")]

    def __str__(self) -> str:
        return f"{self.user} in {self.account} (SCIM)"


class ScimGroup(models.Model):
    """A directory group pushed to the account. Its display name is what
    Account.directory_roles maps to a role (accounts/directory.py)."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="scim_groups")
    display_name = models.CharField(max_length=DIRECTORY_GROUP_MAX)
    external_id = models.CharField(max_length=255, blank=True, db_index=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="scim_groups", blank=True
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "SCIM group"
        constraints = [
            models.UniqueConstraint(fields=["account", "display_name"], name="scim_group_name_once")
        ]

    def __str__(self) -> str:
        return f"{self.display_name} in {self.account} (SCIM)"


class SignedInSession(models.Model):
    """A session key a user signed in with. Django's database sessions are stored encoded,
    so nothing else finds a user's sessions: ending them all looks here."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="signed_in_sessions"
    )
    session_key = models.CharField(max_length=40, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"a session of {self.user}"
