"""The tenant API's usage filters applied, for the API's views and the dashboard alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from accounts.selectors import api_keys_of_user, groups_of_user
from usage import selectors
from usage.api.serializers import UsageQueryIn
from usage.models import UsageLog


@dataclass(frozen=True)
class UsageQuery:
    """Validated usage filters over the accounts the caller may read."""

    accounts: list[int]
    filters: dict = field(default_factory=dict)

    def logs(self) -> QuerySet[UsageLog]:
        return selectors.usage_logs(accounts=self.accounts, **self.filters)

    def count(self) -> int | None:
        return selectors.usage_count(accounts=self.accounts, **self.filters)

    def per_day(self) -> list[dict]:
        return selectors.usage_per_day(accounts=self.accounts, **self.filters)

    def per_model(self) -> list[dict]:
        return selectors.usage_per_model(accounts=self.accounts, **self.filters)

    def cache(self) -> selectors.CacheReport:
        return selectors.cache_report(accounts=self.accounts, **self.filters)


def usage_query(*, user: User, params: Mapping, account: int | None = None) -> UsageQuery:
    """Validate the usage filters for the user's accounts (`account` only, when given). Bad
    filters raise ValidationError (400); a group or key the user cannot see there raises
    Http404."""
    query = UsageQueryIn(data=params)
    query.is_valid(raise_exception=True)
    filters = query.validated_data
    groups, keys = groups_of_user(user=user), api_keys_of_user(user=user)
    if account is not None:
        groups, keys = groups.filter(account_id=account), keys.filter(group__account_id=account)
    if "group" in filters:
        get_object_or_404(groups, pk=filters["group"])
    if "key" in filters:
        get_object_or_404(keys, pk=filters["key"])
    accounts = selectors.account_ids_of_user(user=user, account=account)
    return UsageQuery(accounts=accounts, filters=dict(filters))
