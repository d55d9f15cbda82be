"""The usage CSV export: a tenant's rows as spreadsheet-safe CSV, streamed as they are read.

The rows are read newest first in pages of EXPORT_PAGE, each page after the last one's
(created_at, id) on the account's index, and each page is written out before the next is
read: the first byte leaves at once, and memory holds one page whatever the range. Under
ASGI the lines are an async iterator (Django would otherwise read a sync one whole before
sending a byte); each page's query runs in the request's own thread.
"""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator
from datetime import datetime

import orjson
from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from core.usage_record import TENANT_FIELDS
from usage.models import UsageLog
from usage.selectors import older_than

# A tenant's view of a usage row by API name: the endpoint keeps the name `route` it always
# had in the API and the CSV export. `measurement` (a column of the row, not of the record:
# measured, unmeasured, trueup; usage/crash_rows.py) comes last, so the CSV's columns before
# it stay where they were; `tags` (comma-separated) after it, then `guardrails` (JSON), for
# the same reason.
API_NAMES = {"endpoint": "route"}
LAST = ("measurement", "tags", "guardrails")
ROW_FIELDS = (*(f for f in TENANT_FIELDS if f not in LAST), *LAST)
LOG_FIELDS = [API_NAMES.get(name, name) for name in ROW_FIELDS]
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
EXPORT_PAGE = 2000


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list) and all(isinstance(item, dict) for item in value) and value:
        return orjson.dumps(value).decode()  # guardrail verdicts: a JSON list, "[{..." first
    if isinstance(value, list):  # tags: a-z 0-9 _ . : / -, never a formula's first character
        return ",".join(value)
    # A spreadsheet would run a cell starting like a formula: quote it.
    if isinstance(value, str) and value.startswith(CSV_FORMULA_START):
        return "'" + value
    return value


def rows_after(logs: QuerySet[UsageLog], after: tuple[datetime, int] | None) -> list[tuple]:
    """The next page of `logs` (newest first) after the row at (created_at, id) `after`:
    each row as (created_at, id, *ROW_FIELDS)."""
    page = older_than(logs, after) if after is not None else logs.order_by("-created_at", "-id")
    return list(page.values_list("created_at", "id", *ROW_FIELDS)[:EXPORT_PAGE])


async def csv_lines(logs: QuerySet[UsageLog]) -> AsyncIterator[str]:
    """The CSV export of `logs`: a header line, then a line per row, newest first."""
    writer = csv.writer(_Echo())
    read = sync_to_async(rows_after, thread_sensitive=True)
    yield writer.writerow(LOG_FIELDS)
    after = None
    while True:
        rows = await read(logs, after)
        yield "".join(writer.writerow([_cell(value) for value in row[2:]]) for row in rows)
        if len(rows) < EXPORT_PAGE:
            return
        after = rows[-1][:2]


def usage_csv_response(logs: QuerySet[UsageLog]) -> StreamingHttpResponse:
    """Stream `logs` as CSV, a header line first, as a download named usage.csv."""
    response = StreamingHttpResponse(csv_lines(logs), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    return response
