"""Reads of the usage log, scoped to the caller's account."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Case, Count, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce, NullIf, TruncDate

from accounts.selectors import accounts_of_user
from usage.models import UsageLog


def usage_logs_of_user(
    *,
    user: AbstractBaseUser,
    account: int | None = None,
    group: int | None = None,
    key: int | None = None,
    caller: str | None = None,
    endpoint: str | None = None,
    client_request_id: str | None = None,
    model: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> QuerySet[UsageLog]:
    """Return the user's accounts' usage rows, newest first, filtered (end is exclusive)."""
    logs = UsageLog.objects.filter(account_id__in=accounts_of_user(user=user).values("pk"))
    if account is not None:
        logs = logs.filter(account_id=account)
    if group is not None:
        logs = logs.filter(group_id=group)
    if key is not None:
        logs = logs.filter(api_key_id=key)
    if caller:
        logs = logs.filter(caller_label=caller)
    if endpoint:
        logs = logs.filter(endpoint=endpoint)
    if client_request_id:
        logs = logs.filter(client_request_id=client_request_id)
    if model:
        logs = logs.filter(Q(model_served=model) | Q(model_requested=model))
    if start is not None:
        logs = logs.filter(created_at__gte=start)
    if end is not None:
        logs = logs.filter(created_at__lt=end)
    return logs.order_by("-created_at", "-id")


def usage_log_of_user(*, user: AbstractBaseUser, request_id: str) -> UsageLog | None:
    """Return one of the user's rows by the gateway's id, else the newest with that client id.

    Only the user's own accounts are searched: another tenant's id finds nothing.
    """
    return (
        usage_logs_of_user(user=user)
        .filter(Q(request_id=request_id) | Q(client_request_id=request_id))
        .order_by(
            Case(When(request_id=request_id, then=Value(0)), default=Value(1)),
            "-created_at",
            "-id",
        )
        .prefetch_related("attempts")
        .first()
    )


def _totals() -> dict:
    def total(field: str) -> Coalesce:
        return Coalesce(Sum(field), Value(0))

    return {
        "requests": Count("id"),
        "errors": Count("id", filter=~Q(status=200)),
        "tokens_in": total("tokens_in"),
        "tokens_out": total("tokens_out"),
        "byok_tokens_in": total("byok_tokens_in"),
        "byok_tokens_out": total("byok_tokens_out"),
        "provider_cost_micro": total("provider_cost_micro"),
        "bytes_in": total("bytes_in"),
        "bytes_out": total("bytes_out"),
        "bandwidth_charge_micro": total("bandwidth_charge_micro"),
        "web_pages": total("web_pages"),
        "web_rendered_pages": total("web_rendered_pages"),
        "web_queries": total("web_queries"),
    }


def usage_zero_totals() -> dict:
    """Return the totals of no usage at all: each total usage_per_day gives, at 0."""
    return {name: 0 for name in _totals()}


def usage_per_day(*, logs: QuerySet[UsageLog]) -> list[dict]:
    """Return totals per UTC day, oldest first."""
    return list(
        logs.order_by()
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(**_totals())
        .order_by("day")
    )


def usage_per_model(*, logs: QuerySet[UsageLog]) -> list[dict]:
    """Return totals per model (the one that served, else the one asked for), by name."""
    return list(
        logs.order_by()
        .annotate(model=Coalesce(NullIf("model_served", Value("")), "model_requested"))
        .values("model")
        .annotate(**_totals())
        .order_by("model")
    )
