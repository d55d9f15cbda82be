"""Pages of the tenant API's long lists (usage rows, ledger entries): by cursor, so page
1,000 costs what page 1 does.

A page keeps the shape the lists always had (`count`, `next`, `previous`, `results`).
`count` is what the view's `page_count(queryset)` says, when it has one (the usage list's
comes from the rollups), else the rows counted up to COUNT_CAP: past the cap it is null,
and nothing counts millions of rows. A client paging by `offset` (the earlier contract)
still can, and is answered by offset.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination, LimitOffsetPagination
from rest_framework.response import Response

COUNT_CAP = 10_000


def capped_count(queryset) -> int | None:
    """The rows of `queryset` if at most COUNT_CAP, else None (counting stops there)."""
    # Unordered: an ORDER BY kept in the capped subquery lets PostgreSQL walk the ordering's
    # index over every account's rows to find this one's (seconds cold, at scale).
    counted = queryset.order_by()[: COUNT_CAP + 1].count()
    return counted if counted <= COUNT_CAP else None


class _CountedOffsetPagination(LimitOffsetPagination):
    def __init__(self, count: int | None) -> None:
        self._known_count = count

    def get_count(self, queryset) -> int:
        return self._known_count if self._known_count is not None else queryset.count()


class CountedCursorPagination(CursorPagination):
    """Cursor pages with a count that never scans the whole list. Subclasses set `ordering`
    (unique with its last field)."""

    page_size_query_param = "limit"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        count = getattr(view, "page_count", capped_count)
        self.count = count(queryset)
        if LimitOffsetPagination.offset_query_param in request.query_params:
            self._offset = _CountedOffsetPagination(self.count)
            page = self._offset.paginate_queryset(queryset, request, view)
            self.count = self._offset.count
            return page
        self._offset = None
        self._refuse_a_forged_position(queryset, request, view)
        return super().paginate_queryset(queryset, request, view)

    def _refuse_a_forged_position(self, queryset, request, view) -> None:
        """A cursor is opaque, but the client holds it: one whose position is no value of the
        ordering's field (forged or corrupted) is an invalid cursor (404, as DRF answers one it
        cannot decode), not a query the database would refuse."""
        cursor = self.decode_cursor(request)
        if cursor is None or cursor.position is None:
            return
        name = self.get_ordering(request, queryset, view)[0].lstrip("-")
        try:
            queryset.model._meta.get_field(name).to_python(cursor.position)
        except ValidationError:
            raise NotFound(self.invalid_cursor_message) from None

    def get_paginated_response(self, data) -> Response:
        if self._offset is not None:
            return self._offset.get_paginated_response(data)
        return Response(
            {
                "count": self.count,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: dict) -> dict:
        paged = super().get_paginated_response_schema(schema)
        paged["properties"]["count"] = {
            "type": "integer",
            "nullable": True,
            "example": 123,
            "description": f"Rows in the list; null when more than {COUNT_CAP:,} would have "
            "to be counted.",
        }
        return paged

    def get_schema_operation_parameters(self, view) -> list[dict]:
        return [
            *super().get_schema_operation_parameters(view),
            {
                "name": LimitOffsetPagination.offset_query_param,
                "required": False,
                "in": "query",
                "description": "Page by offset instead (the earlier contract; slow when deep).",
                "schema": {"type": "integer"},
            },
        ]


class NewestFirstPagination(CountedCursorPagination):
    """Rows by creation time, newest first (usage rows)."""

    ordering = ("-created_at", "-id")


class LatestIdFirstPagination(CountedCursorPagination):
    """Rows by id, latest first (ledger entries)."""

    ordering = ("-id",)
