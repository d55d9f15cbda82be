"""SCIM Users: an account's SCIM users are its members, plus the people its directory
deactivated (a ScimUser row without a membership, until the directory activates or deletes
them). Writes here; the resource's shape in scim/resources.py."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts import members
from accounts.models import Account, Membership
from accounts.tokens import tenant_tokens_revoke
from audit import services as audit
from audit.actors import Actor
from scim.errors import ScimError, invalid_value
from scim.models import ScimGroup, ScimUser
from scim.roles import directory_role, last_owner_refusal
from scim.sessions import sessions_end

NAME_PARTS = ("formatted", "familyName", "givenName")
EMAIL_PARTS = ("value", "type", "primary")
AUDITED = ("userName", "email", "externalId", "active")


def users_of_account(account: Account) -> QuerySet:
    """The account's SCIM users: its members and the ones its directory deactivated."""
    return (
        get_user_model()
        .objects.filter(Q(memberships__account=account) | Q(scim_users__account=account))
        .distinct()
        .order_by("id")
    )


def _text(value: Any, name: str, *, limit: int = 255) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise invalid_value(f"{name} is a string of at most {limit} characters.")
    return value


def clean(data: Any) -> dict:
    """Check a User's writable attributes as a POST, PUT or patched resource gives them;
    return them as stored (only what our schema lists)."""
    if not isinstance(data, dict):
        raise invalid_value("A User is a JSON object.")
    lowered = {k.lower(): v for k, v in data.items()}
    username = _text(lowered.get("username"), "userName", limit=150)
    if not username:
        raise invalid_value("userName is required.")
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError as exc:
        raise invalid_value(f"userName: {exc.messages[0]}") from exc
    name = lowered.get("name")
    if name is not None and not isinstance(name, dict):
        raise invalid_value("name is an object.")
    name = {k: _text(name.get(k), f"name.{k}") for k in NAME_PARTS if name and name.get(k)}
    emails = []
    for each in lowered.get("emails") or []:
        if not isinstance(each, dict):
            raise invalid_value("Each email is an object.")
        email = {k: each[k] for k in EMAIL_PARTS if each.get(k) is not None}
        try:
            validate_email(_text(email.get("value"), "emails.value", limit=254) or "")
        except ValidationError as exc:
            raise invalid_value("emails.value is an email address.") from exc
        if "primary" in email and not isinstance(email["primary"], bool):
            raise invalid_value("emails.primary is a boolean.")
        emails.append(email)
    active = lowered.get("active")
    if active is not None and not isinstance(active, bool):
        raise invalid_value("active is a boolean.")
    return {
        "userName": username,
        "name": name or None,
        "displayName": _text(lowered.get("displayname"), "displayName"),
        "emails": emails or None,
        "active": active,
        "externalId": _text(lowered.get("externalid"), "externalId") or "",
    }


def primary_email(emails: list[dict] | None) -> str:
    chosen = [e for e in emails or [] if e.get("primary")] or list(emails or [])
    return chosen[0]["value"] if chosen else ""


def _taken(username: str, *, but: Any = None) -> bool:
    others = get_user_model().objects.filter(username__iexact=username)
    return others.exclude(pk=but.pk).exists() if but is not None else others.exists()


def _uniqueness(username: str) -> ScimError:
    return ScimError(409, f"The userName {username!r} is taken.", "uniqueness")


def _audited(user: Any, row: ScimUser) -> dict:
    return {
        "userName": user.username,
        "email": user.email,
        "externalId": row.external_id,
        "active": row.active,
    }


def _record(account: Account, user: Any, action: str, actor: Actor | None, before, after):
    audit.record_change(
        actor=actor,
        action=action,
        account_id=account.pk,
        target_type="scim_user",
        target_id=user.pk,
        target_label=user.get_username(),
        before=before,
        after=after,
    )


def shared_elsewhere(account: Account, user: Any) -> bool:
    """Whether the person is not this directory's alone: a member of another account too, or
    an operator. Their sign-in name, email and names are theirs everywhere, so this
    account's directory does not change them."""
    return user.is_staff or Membership.objects.filter(user=user).exclude(account=account).exists()


def _store(row: ScimUser, user: Any, data: dict, *, shared: bool = False) -> None:
    if not shared:
        name = data["name"] or {}
        user.username = data["userName"]
        user.email = primary_email(data["emails"])
        user.first_name = (name.get("givenName") or "")[:150]
        user.last_name = (name.get("familyName") or "")[:150]
        user.save(update_fields=["username", "email", "first_name", "last_name"])
    row.external_id = data["externalId"]
    row.active = data["active"]
    row.attributes = {k: data[k] for k in ("name", "displayName", "emails") if data[k]}
    row.updated_at = timezone.now()
    row.save()


@transaction.atomic
def user_create(*, account: Account, data: dict, actor: Actor | None) -> Any:
    """Provision a person: a new Django user without a usable password (they sign in through
    SSO or a set-password link) and, unless created inactive, a viewer membership."""
    if _taken(data["userName"]):
        raise _uniqueness(data["userName"])
    try:
        with transaction.atomic():  # a savepoint: a concurrent create of the name may win
            membership = members.membership_invite(
                account=account,
                username=data["userName"],
                email=primary_email(data["emails"]),
                role=Membership.Role.VIEWER,
                actor=actor,
            )
    except (members.MembershipRefused, IntegrityError) as exc:
        raise _uniqueness(data["userName"]) from exc
    user = membership.user
    row = ScimUser.objects.create(account=account, user=user)
    if data["active"] is None:
        data = {**data, "active": True}  # a person provisioned is active unless said otherwise
    _store(row, user, data)
    _record(account, user, "scim.user.create", actor, {}, _audited(user, row))
    if data["active"] is False:
        _deactivate(account, user, actor)
    return user


@transaction.atomic
def user_replace(*, account: Account, user: Any, data: dict, actor: Actor | None) -> Any:
    """Store a User's attributes (a PUT, or a PATCH's result); `active` moves the person in
    or out of the account."""
    renamed = data["userName"].lower() != user.username.lower()
    shared = shared_elsewhere(account, user)
    if renamed and shared:
        raise ScimError(
            400,
            "This person is also a member of another account (or an operator): their "
            "userName is not this directory's to change.",
            "mutability",
        )
    if renamed and _taken(data["userName"], but=user):
        raise _uniqueness(data["userName"])
    row, _ = ScimUser.objects.get_or_create(account=account, user=user)
    before = _audited(user, row)
    was_active = Membership.objects.filter(account=account, user=user).exists()
    _store(row, user, data, shared=shared)
    _record(account, user, "scim.user.update", actor, before, _audited(user, row))
    if data["active"] is False and was_active:
        _deactivate(account, user, actor)
    elif data["active"] is not False and not was_active:
        _activate(account, user, actor)
    return user


@transaction.atomic
def user_delete(*, account: Account, user: Any, actor: Actor | None) -> None:
    """Deprovision a person from this account: membership, group places and SCIM row go;
    their sessions end and tenant tokens are revoked; the Django user is deactivated only
    when no other account has them."""
    if Membership.objects.filter(account=account, user=user).exists():
        _deactivate(account, user, actor)
    else:
        _end_access(user, actor)
    groups = list(ScimGroup.objects.filter(account=account, members=user))
    for group in groups:
        group.members.remove(user)
    ScimUser.objects.filter(account=account, user=user).delete()
    audit.record(
        actor=actor,
        action="scim.user.delete",
        account_id=account.pk,
        target_type="scim_user",
        target_id=user.pk,
        target_label=user.get_username(),
        before={"userName": user.username, "groups": sorted(g.display_name for g in groups)},
    )


def _deactivate(account: Account, user: Any, actor: Actor | None) -> None:
    """End the person's membership, sessions and tenant API tokens (in the caller's
    transaction: committed before the answer, checked per request on every replica)."""
    membership = Membership.objects.filter(account=account, user=user).first()
    if membership is not None:
        try:
            members.membership_remove(membership=membership, actor=actor)
        except members.MembershipRefused as exc:
            raise last_owner_refusal(exc) from exc
    ended = _end_access(user, actor)
    audit.record(
        actor=actor,
        action="scim.user.deactivate",
        account_id=account.pk,
        target_type="scim_user",
        target_id=user.pk,
        target_label=user.get_username(),
        before={"active": True},
        after={"active": False, **ended},
    )


def _end_access(user: Any, actor: Actor | None) -> dict:
    sessions = sessions_end(user=user)
    tokens = tenant_tokens_revoke(user=user, actor=actor)
    still_member = Membership.objects.filter(user=user).exists()
    # An operator keeps their sign-in to the admin; only their sessions end.
    if not still_member and not user.is_staff and user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    return {"sessions_ended": sessions, "tokens_revoked": tokens, "user_active": still_member}


def _activate(account: Account, user: Any, actor: Actor | None) -> None:
    role = directory_role(account=account, user=user)
    membership = Membership.objects.create(account=account, user=user, role=role)
    members.record_member(
        membership,
        action="member.add",
        actor=actor,
        before={},
        after={"user": user.get_username(), "role": role},
    )
    if not user.is_active:
        user.is_active = True
        user.save(update_fields=["is_active"])
    audit.record(
        actor=actor,
        action="scim.user.activate",
        account_id=account.pk,
        target_type="scim_user",
        target_id=user.pk,
        target_label=user.get_username(),
        before={"active": False},
        after={"active": True, "role": role},
    )
