"""Who a verified sign-in is here: the identity link, the SCIM hook, just-in-time members
and the role the directory's groups give them.

A person is found by (issuer, sub) alone. Their email is read only to admit a new member
(a verified address in one of the account's domains) and kept on the user for display; an
address that changes at the provider changes it here, and never moves the sign-in to
another user.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts import members as account_services
from accounts.directory import role_for_groups
from accounts.models import Membership
from audit import services as audit
from audit.actors import Actor
from sso.models import IdentityLink, Provider
from sso.oidc import SignInRefused


def claimed_groups(claims: dict[str, Any], name: str) -> list[str]:
    """Return the groups claim as a list of names (a lone string is one group)."""
    value = claims.get(name) or []
    if isinstance(value, str):
        value = [value]
    return [g for g in value if isinstance(g, str)] if isinstance(value, list) else []


def verified_email(claims: dict[str, Any]) -> str:
    """Return the claims' email if the provider says it verified it, else ""."""
    email = claims.get("email")
    verified = claims.get("email_verified") in (True, "true")
    return email.strip().lower() if isinstance(email, str) and verified else ""


def scim_user_for(*, account_id: int, subject: str) -> Any:
    """Return the user SCIM provisioned into the account under externalId == `subject`.

    The scim app (issue 41, item 2) stores each provisioned user's externalId; when it is
    installed, a first sign-in whose sub is that externalId is that user. Looked up by name,
    so sso neither imports scim nor needs it installed."""
    try:
        scim_user = apps.get_model("scim", "ScimUser")
    except LookupError:
        return None
    row = (
        scim_user.objects.select_related("user")
        .filter(account_id=account_id, external_id=subject)
        .first()
    )
    if row is not None and row.active is False:  # None: the directory did not say
        raise SignInRefused(
            "Your company's directory has deactivated you in this account.", reason="scim"
        )
    return row.user if row is not None else None


def scim_deactivated(*, account_id: int, user: Any) -> bool:
    """Say whether the account's directory deactivated `user` (SCIM): no sign-in rejoins."""
    try:
        scim_user = apps.get_model("scim", "ScimUser")
    except LookupError:
        return False
    return scim_user.objects.filter(account_id=account_id, user=user, active=False).exists()


def _username_for(email: str, *, issuer: str, subject: str) -> str:
    """The new user's name: the email when free, else the email with a stable suffix."""
    User = get_user_model()
    base = (email or "sso-user")[:130]
    if not User.objects.filter(username__iexact=base).exists():
        return base
    suffix = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:8]
    return f"{base}+{suffix}"


def link_record(link: IdentityLink, *, account_id: int | None, actor: Actor, how: str) -> None:
    audit.record(
        actor=actor,
        action="sso.link",
        account_id=account_id,
        target_type="user",
        target_id=link.user_id,
        target_label=link.user.get_username(),
        after={"issuer": link.issuer, "subject": link.subject, "how": how},
    )


def _apply_role(membership: Membership, role: str | None, *, actor: Actor) -> None:
    """Give the member the directory's role; never demote the account's last owner."""
    if role is None or role == membership.role:
        return
    try:
        account_services.membership_set_role(membership=membership, role=role, actor=actor)
    except account_services.MembershipRefused:
        pass  # the last owner stays owner: an owner's hand changes that, not a claim


@transaction.atomic
def tenant_sign_in(*, provider: Provider, claims: dict[str, Any], address: str | None) -> Any:
    """Return the user these verified claims sign in to the provider's account, creating
    the user, link and membership where the account's rules allow; refuse otherwise."""
    issuer, subject = provider.issuer, claims["sub"]
    account = provider.account
    email = verified_email(claims)
    role = role_for_groups(account, claimed_groups(claims, provider.groups_claim))
    link = (
        IdentityLink.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if link is None:
        scim_user = scim_user_for(account_id=account.pk, subject=subject)
        user = scim_user
        if user is None:
            if not email:
                raise SignInRefused(
                    "Your provider did not confirm your email address, so you cannot join"
                    f" {account} by signing in. Ask an owner of {account} to add you.",
                    reason="unverified",
                )
            domain = email.rpartition("@")[2]
            if domain not in provider.jit_domains:
                raise SignInRefused(
                    f"{email} is not in a domain {account} admits on sign-in. Ask an owner of"
                    f" {account} to add you.",
                    reason="domain",
                )
            User = get_user_model()
            user = User.objects.create_user(
                username=_username_for(email, issuer=issuer, subject=subject), email=email
            )
            user.set_unusable_password()
            user.save(update_fields=["password"])
        link = IdentityLink.objects.create(
            issuer=issuer, subject=subject, user=user, email=claims.get("email") or ""
        )
        actor = Actor("user", user.get_username(), user.pk, address)
        link_record(
            link, account_id=account.pk, actor=actor, how="scim" if scim_user else "sign-in"
        )
    user = link.user
    if not user.is_active:
        raise SignInRefused("This user is deactivated.", reason="inactive")
    actor = Actor("user", user.get_username(), user.pk, address)
    # The provider's address is the person's address now: kept, never matched.
    new_email = claims.get("email")
    if isinstance(new_email, str) and new_email and new_email != user.email:
        user.email = new_email
        user.save(update_fields=["email"])
    link.email = new_email if isinstance(new_email, str) else link.email
    link.last_sign_in_at = timezone.now()
    link.save(update_fields=["email", "last_sign_in_at"])
    membership = Membership.objects.filter(account=account, user=user).first()
    if membership is None:
        domain = email.rpartition("@")[2] if email else ""
        if scim_deactivated(account_id=account.pk, user=user):
            raise SignInRefused(
                "Your company's directory has deactivated you in this account.", reason="scim"
            )
        if domain not in provider.jit_domains:
            raise SignInRefused(
                f"You are not a member of {account}. Ask one of its owners to add you.",
                reason="not-member",
            )
        membership = Membership.objects.create(
            account=account, user=user, role=role or provider.jit_role
        )
        account_services.record_member(
            membership,
            action="member.add",
            actor=actor,
            before={},
            after={"user": user.get_username(), "role": membership.role, "via": "sso"},
        )
    else:
        _apply_role(membership, role, actor=actor)
    return user


@transaction.atomic
def link_current_user(
    *, provider: Provider, claims: dict[str, Any], user: Any, address: str | None
) -> IdentityLink:
    """Link the signed-in member to the identity they just proved at the account's provider
    (both sign-ins proved: the password's and the provider's)."""
    if not Membership.objects.filter(account_id=provider.account_id, user_id=user.pk).exists():
        raise SignInRefused("Only the account's members link their sign-in.", reason="not-member")
    issuer, subject = provider.issuer, claims["sub"]
    link = IdentityLink.objects.filter(issuer=issuer, subject=subject).first()
    if link is not None and link.user_id != user.pk:
        raise SignInRefused(
            "This identity at your provider already signs in another user.", reason="linked"
        )
    if link is None:
        link = IdentityLink.objects.create(
            issuer=issuer, subject=subject, user=user, email=claims.get("email") or ""
        )
        actor = Actor("user", user.get_username(), user.pk, address)
        link_record(link, account_id=provider.account_id, actor=actor, how="linked by the user")
    return link
