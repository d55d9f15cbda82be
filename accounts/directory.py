"""The company directory's word on roles: its groups (an SSO sign-in's groups claim, SCIM
Groups) map to a member's role per account (Account.directory_roles).

An owner (dashboard, tenant API) or an operator (admin) sets the map. A change is recorded
and announced (`directory_roles_changed`, in the writer's transaction): members the
directory provisioned take their new roles at once (scim/roles.py); people who sign in with
SSO take theirs at their next sign-in.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.dispatch import Signal

from accounts.models import Account, Membership, validate_directory_roles
from audit import services as audit
from audit.actors import Actor

RANK = {Membership.Role.VIEWER: 1, Membership.Role.ADMIN: 2, Membership.Role.OWNER: 3}
MAX_GROUPS = 100  # mapped groups per account

# Sent with account= and actor= once the map is saved (inside the writer's transaction).
directory_roles_changed = Signal()


def role_for_groups(account: Account, groups: Iterable[str]) -> str | None:
    """Return the highest role the account maps any of `groups` to (None: none is mapped)."""
    mapped = [account.directory_roles[g] for g in groups if g in account.directory_roles]
    return max(mapped, key=lambda role: RANK[role]) if mapped else None


def directory_roles_parse(text: str) -> dict[str, str]:
    """Read the dashboard's form of the map: one `group = role` per line (blank lines
    skipped); raise ValueError naming the first line that is not one."""
    roles: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        group, equals, role = line.rpartition("=")
        if not equals or not group.strip():
            raise ValueError(f"Line {number} is not 'group = role'.")
        roles[group.strip()] = role.strip()
    return roles


def directory_roles_text(roles: dict[str, str]) -> str:
    """The map as the dashboard's form shows it."""
    return "\n".join(f"{group} = {role}" for group, role in roles.items())


def directory_roles_set(
    *, account: Account, roles: dict[str, str], actor: Actor | None = None
) -> Account:
    """Replace the account's directory roles (ValidationError if invalid), record it, and
    let provisioned members follow it, all in one transaction."""
    validate_directory_roles(roles)
    if len(roles) > MAX_GROUPS:
        raise ValidationError(f"At most {MAX_GROUPS} directory groups map to roles.")
    before = {"directory_roles": account.directory_roles}
    if roles == account.directory_roles:
        return account
    with transaction.atomic():
        account.directory_roles = roles
        account.save(update_fields=["directory_roles"])
        audit.record(
            actor=actor,
            action="account.directory",
            account_id=account.pk,
            target_type="account",
            target_id=account.pk,
            target_label=account.name,
            before=before,
            after={"directory_roles": roles},
        )
        directory_roles_changed.send(sender=Account, account=account, actor=actor)
    return account
