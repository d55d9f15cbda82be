"""A provisioned member's role follows their SCIM Groups (Account.directory_roles through
accounts.directory.role_for_groups): the highest mapped role, viewer when none is mapped."""

from __future__ import annotations

from typing import Any

from accounts import members
from accounts.directory import role_for_groups
from accounts.models import Account, Membership
from audit.actors import Actor
from scim.errors import ScimError
from scim.models import ScimGroup, ScimUser


def directory_role(*, account: Account, user: Any) -> str:
    """The role the account's directory gives `user` now."""
    names = ScimGroup.objects.filter(account=account, members=user).values_list(
        "display_name", flat=True
    )
    return role_for_groups(account, names) or Membership.Role.VIEWER


def last_owner_refusal(exc: Exception) -> ScimError:
    # Well formed, but not compatible with the account's current state (RFC 7644 §3.12).
    return ScimError(400, f"{exc} The change is refused.", "mutability")


def roles_recompute(*, account: Account, users: list[Any], actor: Actor | None) -> None:
    """Give each member among `users` the role their groups map to. Refuses (a SCIM error,
    the caller's transaction rolled back) a change that would demote the last owner."""
    for membership in Membership.objects.filter(account=account, user__in=users).select_related(
        "user"
    ):
        role = directory_role(account=account, user=membership.user)
        if role == membership.role:
            continue
        try:
            members.membership_set_role(membership=membership, role=role, actor=actor)
        except members.MembershipRefused as exc:
            raise last_owner_refusal(exc) from exc


def follow_directory(*, account: Account, actor: Actor | None, **_: Any) -> None:
    """The account's directory roles changed (accounts.directory.directory_roles_changed):
    each member the directory provisioned takes the role its groups map to now. The
    account's last owner stays owner: an owner's hand changes that, not a map."""
    provisioned = ScimUser.objects.filter(account=account).values("user")
    for membership in Membership.objects.filter(
        account=account, user__in=provisioned
    ).select_related("user"):
        role = directory_role(account=account, user=membership.user)
        if role == membership.role:
            continue
        try:
            members.membership_set_role(membership=membership, role=role, actor=actor)
        except members.MembershipRefused:
            continue
