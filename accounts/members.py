"""Writes of an account's members: invite, change a role, remove; the last owner stays.

The dashboard's members page, the tenant API's /api/members and SCIM provisioning all change
members through these functions, so each keeps the same rule and the same audit entries.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from accounts.models import Account, Membership
from audit import services as audit
from audit.actors import Actor


class MembershipRefused(Exception):
    """A change of members that would leave the account without an owner, or a clash."""


def record_member(
    membership: Membership, *, action: str, actor: Actor | None, before: dict, after: dict
) -> None:
    audit.record(
        actor=actor,
        action=action,
        account_id=membership.account_id,
        target_type="member",
        target_id=membership.pk,
        target_label=membership.user.get_username(),
        before=before,
        after=after,
    )


@transaction.atomic
def membership_invite(
    *, account: Account, username: str, email: str, role: str, actor: Actor | None = None
) -> Membership:
    """Add a new person to the account with a role. They have no password: they set one
    through a one-time link (accounts.logins.password_link_issue).

    Only a new username: a set-password link for an existing user would hand the inviter
    that person's sign-in (an operator adds an existing user to another account in the
    admin, under Memberships)."""
    User = get_user_model()
    if User.objects.filter(username__iexact=username).exists():
        raise MembershipRefused(f"The username {username!r} is taken: choose another.")
    user = User.objects.create_user(username=username, email=email or "")
    user.set_unusable_password()
    user.save(update_fields=["password"])
    membership = Membership.objects.create(account=account, user=user, role=role)
    after = {"user": username, "role": role}
    record_member(membership, action="member.add", actor=actor, before={}, after=after)
    return membership


@transaction.atomic
def membership_set_role(
    *, membership: Membership, role: str, actor: Actor | None = None
) -> Membership:
    _keep_an_owner(membership, leaving=role != Membership.Role.OWNER)
    was = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    if was != role:
        before, after = {"role": was}, {"role": role}
        record_member(membership, action="member.role", actor=actor, before=before, after=after)
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor: Actor | None = None) -> None:
    _keep_an_owner(membership, leaving=True)
    before = {"user": membership.user.get_username(), "role": membership.role}
    record_member(membership, action="member.remove", actor=actor, before=before, after={})
    membership.delete()


def _keep_an_owner(membership: Membership, *, leaving: bool) -> None:
    owners = Membership.objects.select_for_update().filter(
        account_id=membership.account_id, role=Membership.Role.OWNER
    )
    if leaving and membership.role == Membership.Role.OWNER and owners.count() <= 1:
        raise MembershipRefused("An account keeps at least one owner.")
