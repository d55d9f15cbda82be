"""Changes to an account's single sign-on, audited; and the rule that reads them at the
password form."""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Account, Membership
from audit import services as audit
from audit.actors import Actor
from sso.models import IdentityLink, Provider

AUDITED = (
    "issuer",
    "client_id",
    "display_name",
    "jit_domains",
    "jit_role",
    "groups_claim",
    "enabled",
    "password_sign_in",
)


class SettingsRefused(Exception):
    """A change that would lock the account's owners out."""


def _state(provider: Provider) -> dict[str, Any]:
    state = {name: getattr(provider, name) for name in AUDITED}
    state["client_secret_set"] = bool(provider.client_secret_version)
    return state


def owners_linked(*, account_id: int, issuer: str) -> bool:
    """Say whether an owner of the account signs in through its provider already."""
    owners = Membership.objects.filter(account_id=account_id, role=Membership.Role.OWNER)
    return IdentityLink.objects.filter(issuer=issuer, user_id__in=owners.values("user_id")).exists()


def password_off_refusal(
    *, account_id: int, issuer: str, enabled: bool, password_sign_in: bool
) -> str | None:
    """Return why password sign-in cannot go off with these settings (None: it can)."""
    if password_sign_in or (enabled and owners_linked(account_id=account_id, issuer=issuer)):
        return None
    return (
        "Password sign-in stays on until single sign-on is enabled and an owner has signed"
        " in with it (link yourself first), or nobody could sign in to turn it back on."
    )


@transaction.atomic
def provider_save(
    *, account: Account, actor: Actor | None, client_secret: str = "", **fields: Any
) -> Provider:
    """Create or change the account's provider (an empty `client_secret` keeps the one kept).

    Password sign-in goes off only with single sign-on on and an owner already linked to
    the provider: otherwise nobody could sign in to change it back."""
    provider = Provider.objects.select_for_update().filter(account=account).first()
    created = provider is None
    if provider is None:
        provider = Provider(account=account)
    before = {} if created else _state(provider)
    for name, value in fields.items():
        if name not in AUDITED:
            raise TypeError(f"provider_save got an unknown field {name!r}")
        setattr(provider, name, value)
    if client_secret:
        provider.set_client_secret(client_secret)
    why = password_off_refusal(
        account_id=account.pk,
        issuer=provider.issuer,
        enabled=provider.enabled,
        password_sign_in=provider.password_sign_in,
    )
    if why:
        raise SettingsRefused(why)
    provider.updated_at = timezone.now()
    provider.save()
    after = _state(provider)
    if client_secret and not created:
        after["client_secret_changed"] = True  # the fact, never the value
    if created:
        audit.record(
            actor=actor,
            action="sso.settings",
            account_id=account.pk,
            target_type="sso provider",
            target_id=provider.pk,
            target_label=provider.display_name,
            after=after,
        )
    else:
        audit.record_change(
            actor=actor,
            action="sso.settings",
            account_id=account.pk,
            target_type="sso provider",
            target_id=provider.pk,
            target_label=provider.display_name,
            before=before,
            after=after,
        )
    return provider


SSO_ONLY = (
    'Your account signs in with single sign-on only: use "Continue with single sign-on"'
    " below with your work email."
)


def password_sign_in_allowed(*, user: Any) -> bool:
    """Say whether `user` may sign in with a password: not while any account they belong
    to requires single sign-on (the strictest account's rule holds for the person)."""
    return not Provider.objects.filter(
        account__memberships__user=user, enabled=True, password_sign_in=False
    ).exists()


def providers_for_email(email: str) -> list[Provider]:
    """Return the enabled providers that admit `email`'s domain (the login page's lookup).

    Only the domain is read: it routes the person to a provider, which then says who they
    are."""
    domain = email.strip().lower().rpartition("@")[2]
    if not domain:
        return []
    providers = Provider.objects.select_related("account").filter(enabled=True)
    if connection.vendor == "postgresql":  # jsonb @>; SQLite (embedded) reads them all
        providers = providers.filter(jit_domains__contains=[domain])
    return [p for p in providers if domain in p.jit_domains]
