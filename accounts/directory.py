"""The company directory's word on roles: its groups (an SSO sign-in's groups claim, SCIM
Groups) map to a member's role per account (Account.directory_roles)."""

from __future__ import annotations

from collections.abc import Iterable

from accounts.models import Account, Membership

RANK = {Membership.Role.VIEWER: 1, Membership.Role.ADMIN: 2, Membership.Role.OWNER: 3}


def role_for_groups(account: Account, groups: Iterable[str]) -> str | None:
    """Return the highest role the account maps any of `groups` to (None: none is mapped)."""
    mapped = [account.directory_roles[g] for g in groups if g in account.directory_roles]
    return max(mapped, key=lambda role: RANK[role]) if mapped else None
