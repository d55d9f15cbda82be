"""Who may change what inside an account."""

from __future__ import annotations

from rest_framework.exceptions import PermissionDenied

from accounts.models import Account, Membership
from accounts.selectors import membership_role

MANAGERS = (Membership.Role.OWNER, Membership.Role.ADMIN)


def require_manager(*, user, account: Account) -> None:
    """Refuse (403) a member who is not an owner or admin of an account they can see."""
    if membership_role(user=user, account=account) not in MANAGERS:
        raise PermissionDenied("Only the account's owners and admins may do this.")
