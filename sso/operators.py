"""The operators' own provider for the Django admin, from settings (TOLLGATE_ADMIN_OIDC_*).

Who may enter is the operator's list: a subject in TOLLGATE_ADMIN_OIDC_SUBJECTS, or a
member of the group TOLLGATE_ADMIN_OIDC_GROUP (read from the groups claim). Each sign-in
checks it again, so a person taken out of the group is refused at their next sign-in.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from audit import services as audit
from audit.actors import Actor, Kind
from sso.identities import claimed_groups, link_record
from sso.models import IdentityLink
from sso.oidc import Client, SignInRefused


def operator_provider() -> dict[str, Any] | None:
    """Return the operators' provider settings, or None when it is not configured."""
    conf = settings.ADMIN_OIDC
    return conf if conf["ISSUER"] and conf["CLIENT_ID"] else None


def operator_client(*, redirect_uri: str) -> Client | None:
    conf = operator_provider()
    if conf is None:
        return None
    return Client(
        issuer=conf["ISSUER"],
        client_id=conf["CLIENT_ID"],
        client_secret=conf["CLIENT_SECRET"],
        redirect_uri=redirect_uri,
        operator=True,
    )


def admitted(claims: dict[str, Any]) -> bool:
    conf = settings.ADMIN_OIDC
    if claims["sub"] in conf["SUBJECTS"]:
        return True
    group = conf["GROUP"]
    return bool(group) and group in claimed_groups(claims, conf["GROUPS_CLAIM"])


@transaction.atomic
def operator_sign_in(*, claims: dict[str, Any], address: str | None) -> Any:
    """Return the operator these verified claims sign in to the admin (a superuser)."""
    conf = settings.ADMIN_OIDC
    if not admitted(claims):
        raise SignInRefused(
            "Your identity is not one of the operators'. Ask an operator to add your subject"
            " or group to the admin's sign-in settings.",
            reason="not-operator",
        )
    issuer, subject = conf["ISSUER"], claims["sub"]
    link = (
        IdentityLink.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    )
    User = get_user_model()
    if link is None:
        base = str(claims.get("preferred_username") or claims.get("email") or "operator")[:130]
        name = base
        if User.objects.filter(username__iexact=name).exists():
            digest = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()
            name = f"{base}+{digest[:8]}"
        user = User.objects.create_user(username=name, email=claims.get("email") or "")
        user.set_unusable_password()
        user.save(update_fields=["password"])
        link = IdentityLink.objects.create(
            issuer=issuer, subject=subject, user=user, email=claims.get("email") or ""
        )
        link_record(
            link,
            account_id=None,
            actor=Actor(Kind.OPERATOR, name, user.pk, address),
            how="operator sign-in",
        )
    user = link.user
    if not user.is_active:
        raise SignInRefused("This user is deactivated.", reason="inactive")
    actor = Actor(Kind.OPERATOR, user.get_username(), user.pk, address)
    if not (user.is_staff and user.is_superuser):
        audit.record(
            actor=actor,
            action="sso.operator",
            account_id=None,
            target_type="user",
            target_id=user.pk,
            target_label=user.get_username(),
            before={"is_staff": user.is_staff, "is_superuser": user.is_superuser},
            after={"is_staff": True, "is_superuser": True},
        )
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    link.last_sign_in_at = timezone.now()
    link.save(update_fields=["last_sign_in_at"])
    return user
