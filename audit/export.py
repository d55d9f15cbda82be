"""Exports of the trail: CSV for people (a summary in dollars beside the exact JSON) and JSON
lines for machines (each line the entry as hashed: `python manage.py verify_audit --jsonl
FILE` checks an export offline). Streamed a page at a time, newest first; under ASGI the
lines are an async iterator (Django would read a sync one whole before the first byte) and
each page is read in the request's own thread."""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from audit.chain import HASHED_FIELDS
from audit.models import AuditEntry
from audit.summary import summary

PAGE = 2000
_CHANGE = HASHED_FIELDS.index("before")
# The hashed fields with the entry's id, its summary before the change and the chain's hashes.
CSV_FIELDS = [
    "id",
    *HASHED_FIELDS[:_CHANGE],
    "summary",
    *HASHED_FIELDS[_CHANGE:],
    "prev_hash",
    "hash",
]
# A spreadsheet runs a cell that starts like a formula: such a cell is quoted.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    def write(self, value: str) -> str:
        return value


def page_after(entries: QuerySet[AuditEntry], last: int | None) -> list[AuditEntry]:
    """The next PAGE entries of `entries`, newest first, older than the entry `last`."""
    ordered = entries.order_by("-id")
    return list((ordered.filter(id__lt=last) if last is not None else ordered)[:PAGE])


async def _pages(entries: QuerySet[AuditEntry]) -> AsyncIterator[list[AuditEntry]]:
    read = sync_to_async(page_after, thread_sensitive=True)
    last: int | None = None
    while True:
        page = await read(entries, last)
        yield page
        if len(page) < PAGE:
            return
        last = page[-1].pk


def _cell(value: object) -> object:
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_row(entry: AuditEntry) -> list[object]:
    row = {**entry.as_record(), "summary": summary(entry)}
    return [_cell(row[name]) for name in CSV_FIELDS]


def jsonl_line(entry: AuditEntry) -> str:
    return json.dumps(entry.as_record(), ensure_ascii=False, sort_keys=True) + "\n"


async def csv_lines(entries: QuerySet[AuditEntry]) -> AsyncIterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_FIELDS)
    async for page in _pages(entries):
        yield "".join(writer.writerow(csv_row(entry)) for entry in page)


async def jsonl_lines(entries: QuerySet[AuditEntry]) -> AsyncIterator[str]:
    async for page in _pages(entries):
        yield "".join(jsonl_line(entry) for entry in page)


def csv_response(
    entries: QuerySet[AuditEntry], *, filename: str = "audit.csv"
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_lines(entries), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def jsonl_response(
    entries: QuerySet[AuditEntry], *, filename: str = "audit.jsonl"
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        jsonl_lines(entries), content_type="application/x-ndjson; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
