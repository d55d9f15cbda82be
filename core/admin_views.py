"""What the apps' admin pages share."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import IntegerField, Q
from django.utils.functional import cached_property


class ReadOnly:
    """Admin mixin for a record kept by Tollgate itself (a log, a ledger, a job): listed and
    read, never added, changed or deleted by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class CappedCountPaginator(Paginator):
    """Counts at most COUNT_CAP rows: a changelist over millions pages on without counting
    them all (the pages after the cap are reached from the last one's filters)."""

    COUNT_CAP = 10_000

    @cached_property
    def count(self) -> int:
        return self.object_list[: self.COUNT_CAP].count()


class LargeTable:
    """Admin mixin for a table that grows with traffic: no full counts, capped page counts,
    and a search that matches `search_fields` exactly, as stored (Django's `=field` compares
    upper-cased values, which no index serves). Pair it with fixed-choice list filters."""

    paginator = CappedCountPaginator
    show_full_result_count = False

    def get_search_results(self, request, queryset, search_term: str):
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q()
        for name in self.search_fields:
            name = name.lstrip("=")
            field = queryset.model._meta.get_field(name)
            if isinstance(field, IntegerField):
                if not term.isdigit():
                    continue
                match |= Q(**{name: int(term)})
            else:
                match |= Q(**{name: term})
        return (queryset.filter(match) if match else queryset.none()), False
