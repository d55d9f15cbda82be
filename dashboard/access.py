"""Who sees which account in the dashboard, and who may change what there.

A page names its account in the URL; a user who is not a member of it gets a 404, as does
an object of another account, so nothing confirms that a foreign id exists. Viewers see
everything of their account; owners and admins may also change it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.http import Http404

from accounts.api.permissions import MANAGERS
from accounts.models import Account, Membership


@dataclass(frozen=True)
class Seat:
    """The signed-in user's place in one account."""

    account: Account
    role: str

    @property
    def can_change(self) -> bool:
        return self.role in MANAGERS

    @property
    def is_owner(self) -> bool:
        return self.role == Membership.Role.OWNER


def seat_of(*, user, account_id: int) -> Seat:
    """Return the user's seat in the account, or raise 404 if they hold none."""
    membership = (
        Membership.objects.select_related("account")
        .filter(user=user, account_id=account_id)
        .first()
    )
    if membership is None:
        raise Http404("No such account.")
    return Seat(account=membership.account, role=membership.role)


def first_account_id(*, user) -> int | None:
    """Return the id of the first account the user is a member of, if any."""
    return (
        Membership.objects.filter(user=user)
        .order_by("account_id")
        .values_list("account_id", flat=True)
    ).first()


def require_owner(seat: Seat) -> None:
    """Refuse (403) anyone but an owner: members and roles are the owners' to change."""
    if seat.role != Membership.Role.OWNER:
        raise PermissionDenied("Only the account's owners may change its members.")


def require_change(seat: Seat) -> None:
    """Refuse (403) a viewer's attempt to change their account."""
    if not seat.can_change:
        raise PermissionDenied("Only the account's owners and admins may change it.")
