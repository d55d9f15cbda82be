"""The usage list's pages: by cursor, so page 1,000 costs what page 1 does.

The page keeps the shape it always had (`count`, `next`, `previous`, `results`). `count`
comes from the rollups, exact and cheap; with a filter only the rows know (caller, client
request id) it is counted from the rows up to 10,000, and is null past that: nothing counts
millions of rows. A client that pages
by `offset` (the earlier contract) still can, and is then answered by offset.
"""

from __future__ import annotations

from rest_framework.pagination import CursorPagination, LimitOffsetPagination
from rest_framework.response import Response


class _CountedOffsetPagination(LimitOffsetPagination):
    def __init__(self, count: int | None) -> None:
        self._known_count = count

    def get_count(self, queryset) -> int:
        return self._known_count if self._known_count is not None else queryset.count()


class UsagePagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size_query_param = "limit"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        self.count = view.usage_query.count()
        if LimitOffsetPagination.offset_query_param in request.query_params:
            self._offset = _CountedOffsetPagination(self.count)
            page = self._offset.paginate_queryset(queryset, request, view)
            self.count = self._offset.count
            return page
        self._offset = None
        return super().paginate_queryset(queryset, request, view)

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
            "description": "Rows matching the filters; null when a caller or client request "
            "id filter matches more than 10,000.",
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
