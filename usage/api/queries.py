"""The tenant API's usage filters applied, for the API's views and the dashboard alike."""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from accounts.selectors import api_keys_of_user, groups_of_user
from usage import selectors
from usage.api.serializers import UsageQueryIn
from usage.models import UsageLog


def usage_query_logs(
    *, user: AbstractBaseUser, params: Mapping, account: int | None = None
) -> QuerySet[UsageLog]:
    """Validate the usage filters and return the user's matching rows (in `account` only,
    when given). Bad filters raise ValidationError (400); a group or key the user cannot
    see there raises Http404."""
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
    return selectors.usage_logs_of_user(user=user, account=account, **filters)
