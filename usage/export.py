"""The usage CSV export: a tenant's rows as spreadsheet-safe CSV, streamed."""

from __future__ import annotations

import csv
from datetime import datetime

from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from core.usage_record import TENANT_FIELDS
from usage.models import UsageLog

# A tenant's view of a usage record by API name: the endpoint keeps the name `route` it
# always had in the API and the CSV export.
API_NAMES = {"endpoint": "route"}
LOG_FIELDS = [API_NAMES.get(name, name) for name in TENANT_FIELDS]
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    # A spreadsheet would run a cell starting like a formula: quote it.
    if isinstance(value, str) and value.startswith(CSV_FORMULA_START):
        return "'" + value
    return value


def usage_csv_response(logs: QuerySet[UsageLog]) -> StreamingHttpResponse:
    """Stream `logs` as CSV, a header line first, as a download named usage.csv."""
    writer = csv.writer(_Echo())

    def lines():
        yield writer.writerow(LOG_FIELDS)
        for row in logs.values_list(*TENANT_FIELDS).iterator(chunk_size=2000):
            yield writer.writerow([_cell(value) for value in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    return response
