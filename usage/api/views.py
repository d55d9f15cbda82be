"""Tenant usage API: the caller's own usage rows, totals per day and per model, CSV export.

Every view reads through one scoped query: another account's group or key is a 404.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.schema import error_responses
from usage import selectors
from usage.api import serializers as s
from usage.api.queries import usage_query_logs
from usage.export import usage_csv_response
from usage.models import UsageLog


def scoped_logs(request) -> QuerySet[UsageLog]:
    """Validate the query filters and return the caller's matching usage rows."""
    return usage_query_logs(user=request.user, params=request.query_params)


@extend_schema_view(
    get=extend_schema(
        operation_id="usage_list",
        tags=["usage"],
        summary="The caller's usage rows, newest first, filtered",
        parameters=[s.UsageQueryIn],
        responses={200: s.UsageLogOut(many=True), **error_responses(400, 404)},
    )
)
class UsageListView(ListAPIView):
    serializer_class = s.UsageLogOut

    def get_queryset(self):
        return scoped_logs(self.request)


class UsageDetailView(APIView):
    @extend_schema(
        operation_id="usage_request_retrieve",
        tags=["usage"],
        summary="One request's usage row with its attempt trail (who paid each attempt)",
        responses={200: s.UsageLogDetailOut, **error_responses(404)},
    )
    def get(self, request, request_id: str):
        usage_log = selectors.usage_log_of_user(user=request.user, request_id=request_id)
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
        rows = selectors.usage_per_day(logs=scoped_logs(request))
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
        rows = selectors.usage_per_model(logs=scoped_logs(request))
        return Response({"results": s.ModelTotalsOut(rows, many=True).data})


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
        return usage_csv_response(scoped_logs(request))
