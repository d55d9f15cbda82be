"""Reads of the audit trail: an account's entries (the dashboard, the tenant API), every
entry (the admin), newest first."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from audit.models import AuditEntry


def entries_of_accounts(*, account_ids: Iterable[int], action: str = "") -> QuerySet[AuditEntry]:
    """The entries of these accounts, newest first; only `action`'s (and the actions under
    it: "pool.fallback" takes both switches) when one is named."""
    entries = AuditEntry.objects.filter(account_id__in=list(account_ids))
    return by_action(entries, action).order_by("-id")


def by_action(entries: QuerySet[AuditEntry], action: str) -> QuerySet[AuditEntry]:
    action = action.strip().rstrip(".")
    if not action:
        return entries
    return entries.filter(action=action) | entries.filter(action__startswith=action + ".")


def actions_of_accounts(*, account_ids: Iterable[int]) -> list[str]:
    """The actions the accounts' entries hold, sorted (the filter's choices)."""
    return sorted(
        AuditEntry.objects.filter(account_id__in=list(account_ids))
        .values_list("action", flat=True)
        .distinct()
    )
