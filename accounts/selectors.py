"""Reads of tenants, scoped to the caller's account."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet

from accounts.models import Account, ApiKey, Group, Membership


def accounts_of_user(*, user: User) -> QuerySet[Account]:
    return Account.objects.filter(memberships__user=user)


def account_of_user(*, user: User, account_id: int | None = None) -> Account | None:
    """Return one of the user's accounts: `account_id`'s, or without one their first (lowest
    id); None if they have no such account (the tenant API answers 404: it confirms nothing)."""
    accounts = accounts_of_user(user=user).order_by("id")
    return accounts.filter(pk=account_id).first() if account_id else accounts.first()


def groups_of_user(*, user: User) -> QuerySet[Group]:
    return Group.objects.filter(account__memberships__user=user).order_by("id")


def api_keys_of_user(*, user: User) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(group__account__memberships__user=user).order_by("id")


def membership_role(*, user: User, account: Account) -> str | None:
    membership = Membership.objects.filter(user=user, account=account).first()
    return membership.role if membership else None
