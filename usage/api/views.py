"""Tenant usage API: the caller's own usage rows, totals per day and per model, the response
cache's hit rate and money saved, CSV export.

Every view reads through one scoped query: another account's group or key is a 404.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import request_id_or_404
from accounts.api.pagination import NewestFirstPagination, capped_count
from accounts.api.schema import error_responses
from usage import selectors
from usage.api import serializers as s
from usage.api.queries import UsageQuery, usage_query
from usage.export import usage_csv_response
from usage.tags import tag_totals


def scoped_query(request) -> UsageQuery:
    """Validate the query filters over the caller's accounts."""
    return usage_query(user=request.user, params=request.query_params)


@extend_schema_view(
    get=extend_schema(
        operation_id="usage_list",
        tags=["usage"],
        summary="The caller's usage rows, newest first, filtered, by cursor (`next`)",
        parameters=[s.UsageQueryIn],
        responses={200: s.UsageLogOut(many=True), **error_responses(400, 404)},
    )
)
class UsageListView(ListAPIView):
    serializer_class = s.UsageLogOut
    pagination_class = NewestFirstPagination

    def get_queryset(self):
        self.usage_query = scoped_query(self.request)
        return self.usage_query.logs()

    def page_count(self, queryset) -> int | None:
        count = self.usage_query.count()
        return count if count is not None else capped_count(queryset)


class UsageDetailView(APIView):
    @extend_schema(
        operation_id="usage_request_retrieve",
        tags=["usage"],
        summary="One request's usage row with its attempt trail (who paid each attempt)",
        responses={200: s.UsageLogDetailOut, **error_responses(404)},
    )
    def get(self, request, request_id: str):
        usage_log = selectors.usage_log_of_user(
            user=request.user, request_id=request_id_or_404(request_id)
        )
        if usage_log is None:
            raise Http404
        return Response(s.UsageLogDetailOut(usage_log).data)


class UsagePerDayView(APIView):
    @extend_schema(
        operation_id="usage_daily_list",
        tags=["usage"],
        summary="Totals per UTC day of the filtered usage",
        parameters=[s.UsageQueryIn],
        responses={200: s.DayTotalsPage, **error_responses(400, 404)},
    )
    def get(self, request):
        rows = scoped_query(request).per_day()
        return Response({"results": s.DayTotalsOut(rows, many=True).data})


class UsagePerModelView(APIView):
    @extend_schema(
        operation_id="usage_models_list",
        tags=["usage"],
        summary="Totals per model of the filtered usage",
        parameters=[s.UsageQueryIn],
        responses={200: s.ModelTotalsPage, **error_responses(400, 404)},
    )
    def get(self, request):
        rows = scoped_query(request).per_model()
        return Response({"results": s.ModelTotalsOut(rows, many=True).data})


class UsageCacheView(APIView):
    @extend_schema(
        operation_id="usage_cache_retrieve",
        tags=["usage"],
        summary="The response cache's hit rate and money saved over the filtered usage, in all "
        "and per key, group and model",
        parameters=[s.UsageQueryIn],
        responses={200: s.CacheReportOut, **error_responses(400, 404)},
    )
    def get(self, request):
        return Response(s.CacheReportOut(scoped_query(request).cache()).data)


class UsagePerTagView(APIView):
    @extend_schema(
        operation_id="usage_tags_list",
        tags=["usage"],
        summary="Totals per request tag over a time range (a request with several tags counts "
        "under each)",
        parameters=[s.TagQueryIn],
        responses={200: s.TagTotalsPage, **error_responses(400)},
    )
    def get(self, request):
        query = s.TagQueryIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        accounts = selectors.account_ids_of_user(user=request.user)
        rows = tag_totals(accounts=accounts, **query.validated_data)
        return Response({"results": s.TagTotalsOut(rows, many=True).data})


class UsageExportView(APIView):
    @extend_schema(
        operation_id="usage_export_csv",
        tags=["usage"],
        summary="The filtered usage rows as CSV (a header row, then one line per request)",
        parameters=[s.UsageQueryIn],
        responses={
            (200, "text/csv"): OpenApiResponse(
                response=OpenApiTypes.STR, description="usage.csv, streamed."
            ),
            **error_responses(400, 404),
        },
    )
    def get(self, request):
        return usage_csv_response(scoped_query(request).logs())
