"""Inputs of the tenant API bounded by where they are stored, so a value the database cannot
hold is a 400 naming the field (LM-2001), never a database error.

PostgreSQL refuses an integer past its column's type (a bigint, or Django's
PositiveIntegerField's integer) and any text holding NUL; both would otherwise surface as a
500 after the query was sent.
"""

from __future__ import annotations

import re

from django.db import connection, models
from django.http import Http404
from rest_framework import serializers

from accounts.models import Account
from accounts.selectors import account_of_user
from core.money import MAX_TYPED_MICRO
from core.tags import RULE as TAG_RULE
from core.tags import TagError, clean_tags

# A request id in a path: the gateway's own (32 hex digits) or a client's X-Request-Id label;
# both are 1-64 of these (gateway/pipeline.py's REQUEST_ID_OK). Nothing else names a row.
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def column_range(model: type[models.Model], field_name: str) -> tuple[int | None, int | None]:
    """The smallest and largest integer the model field's column holds (None: unbounded)."""
    field = model._meta.get_field(field_name)
    return connection.ops.integer_field_range(field.get_internal_type())


def column_integer(
    model: type[models.Model], field_name: str, *, min_value: int | None = None, **kwargs
) -> serializers.IntegerField:
    """An integer input no larger (nor smaller) than the column it is stored in or compared
    with: `min_value` narrows the column's own lower bound."""
    low, high = column_range(model, field_name)
    if min_value is not None:
        low = min_value if low is None else max(low, min_value)
    return serializers.IntegerField(min_value=low, max_value=high, **kwargs)


def money_micro(**kwargs) -> serializers.IntegerField:
    """A budget in micro-USD: from 0 up to the most one typed amount may be (a billion dollars,
    as the dashboard and admin take it). Far inside a bigint, so the ledger's own arithmetic on
    it (a budget times an alert percent) cannot overflow either."""
    return serializers.IntegerField(min_value=0, max_value=MAX_TYPED_MICRO, **kwargs)


def id_of(model: type[models.Model], **kwargs) -> serializers.IntegerField:
    """An input naming a row of `model` by id: from 1 up to the id column's largest."""
    return column_integer(model, "id", min_value=1, **kwargs)


def request_id_or_404(request_id: str) -> str:
    """Return a request id from a path, or raise Http404 for one no row can have."""
    if not REQUEST_ID.fullmatch(request_id):
        raise Http404
    return request_id


def account_or_404(request, account_id: int | None) -> Account:
    """One of the caller's accounts: `account_id`'s, or their first without one
    (`accounts.selectors.account_of_user`); Http404 for any other (it confirms nothing)."""
    account = account_of_user(user=request.user, account_id=account_id)
    if account is None:
        raise Http404
    return account


class DefaultTagsField(serializers.ListField):
    """A key's or group's default tags (core/tags.py): cleaned (lower-cased, duplicates
    dropped); a tag breaking the rules is a 400 naming them."""

    child = serializers.CharField(trim_whitespace=False)

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault(
            "help_text",
            "Tags added to every request after its own (a key's before its group's). "
            + TAG_RULE
            + ".",
        )
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> list[str]:
        try:
            return list(clean_tags(super().to_internal_value(data)))
        except TagError as exc:
            raise serializers.ValidationError(str(exc)) from None
