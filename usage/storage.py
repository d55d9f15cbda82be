"""Usage rows into the database in one statement per batch, skipping request ids stored already.

The writer runs in the gateway process for every request, so rows do not go through the
ORM's per-field machinery. On PostgreSQL a batch is two parameters, the records as JSON
unpacked by `json_to_recordset` and their packed attempt trails (usage/trail.py) as a bytea
array, zipped row by row by ROWS FROM: the statement's text is the same for every batch, so
it is parsed once. Elsewhere (embedded SQLite) it is a multi-row INSERT. Either way a request
id stored already (a replay, or another writer's claim) is skipped by the insert itself (ON
CONFLICT DO NOTHING), even a concurrent one.

The conflict target is (request_id, created_at), on both vendors: on PostgreSQL the log is
partitioned by month of created_at, and a unique key there must hold it. A replay carries
the record's own created_at, so it still meets the stored row.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache

import orjson
from django.db import connection
from django.db.models import IntegerField

from core.db import values_placeholders
from core.usage_record import LOG_FIELDS, UsageRecord
from usage.models import UsageLog
from usage.trail import pack_trail

# The log's unique key (UsageLog.Meta): a request id stored already is skipped.
_CONFLICT = "(request_id, created_at)"
_INTEGERS = tuple(
    name for name in LOG_FIELDS if isinstance(UsageLog._meta.get_field(name), IntegerField)
)
# An attempt's numbers: stored as they are in its trail's JSON, so only ints (or None) pass.
_ATTEMPT_INTEGERS = ("order", "upstream_status", "latency_ms", "reservation_id")
# The log's column of the packed trail, written after the record's own.
_TRAIL = "attempt_trail"


def insert_new(records: list[UsageRecord], *, stored_at: datetime) -> dict[str, int]:
    """Insert the records (distinct request ids) with their attempt trails, in the caller's
    transaction; return the new rows' ids by request id (none for ids stored already)."""
    for record in records:
        check_numbers(record)
    trails = [pack_trail(record.attempts) for record in records]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_postgres_insert(), [stored_at, orjson.dumps(records).decode(), trails])
            return {request_id: pk for pk, request_id in cursor.fetchall()}
        return _insert_portable(cursor, records, trails, stored_at)


def check_numbers(record: UsageRecord) -> None:
    """Refuse a record whose number fields are not numbers, saying which (a journal entry is
    outside data: its row is dead-lettered with this message)."""
    for name in _INTEGERS:
        value = getattr(record, name)
        if value is not None and type(value) is not int:
            try:
                int(value)
            except (TypeError, ValueError):
                raise ValueError(f"Field '{name}' expected a number but got {value!r}.") from None
    for attempt in record.attempts:
        for name in _ATTEMPT_INTEGERS:
            value = getattr(attempt, name)
            if value is not None and type(value) is not int:
                raise ValueError(
                    f"Attempt {attempt.order!r}'s '{name}' expected a number but got {value!r}."
                )


def _column(model, name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _typed(model, names) -> str:
    """`name type, ...` of the model's fields, as json_to_recordset reads them."""
    return ", ".join(
        f"{connection.ops.quote_name(name)} {model._meta.get_field(name).db_type(connection)}"
        for name in names
    )


@cache
def _postgres_insert() -> str:
    names = (*LOG_FIELDS, _TRAIL)
    log_columns = ", ".join(_column(UsageLog, name) for name in ("stored_at", *names))
    picked = ", ".join(f"r.{connection.ops.quote_name(name)}" for name in names)
    aliases = ", ".join(connection.ops.quote_name(name) for name in names)
    return (
        f"INSERT INTO {UsageLog._meta.db_table} ({log_columns})"
        f" SELECT %s, {picked} FROM ROWS FROM ("
        f"json_to_recordset(%s::json) AS ({_typed(UsageLog, LOG_FIELDS)}),"
        f" unnest(%s::bytea[])) AS r({aliases})"
        f" ON CONFLICT {_CONFLICT} DO NOTHING RETURNING id, request_id"
    )


def _insert_portable(
    cursor, records: list[UsageRecord], trails: list[bytes], stored_at: datetime
) -> dict[str, int]:
    columns = [_column(UsageLog, name) for name in ("stored_at", *LOG_FIELDS, _TRAIL)]
    adapt = connection.ops.adapt_datetimefield_value  # e.g. SQLite's text form, as the ORM's
    created_at = 1 + LOG_FIELDS.index("created_at")
    tags = 1 + LOG_FIELDS.index("tags")
    guardrails = 1 + LOG_FIELDS.index("guardrails")
    values: list = []
    for record, trail in zip(records, trails, strict=True):
        row = [adapt(stored_at), *(getattr(record, name) for name in LOG_FIELDS), trail]
        row[created_at] = adapt(record.created_at)
        row[tags] = orjson.dumps(list(record.tags)).decode()  # JSON text columns here
        row[guardrails] = orjson.dumps(list(record.guardrails)).decode()
        values += row
    cursor.execute(
        f"INSERT INTO {UsageLog._meta.db_table} ({', '.join(columns)})"
        f" VALUES {values_placeholders(len(records), len(columns))}"
        f" ON CONFLICT {_CONFLICT} DO NOTHING RETURNING id, request_id",
        values,
    )
    return {request_id: pk for pk, request_id in cursor.fetchall()}
