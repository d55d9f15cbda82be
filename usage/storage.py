"""Usage rows into the database in one statement per batch, skipping request ids stored already.

The writer runs in the gateway process for every request, so rows do not go through the
ORM's per-field machinery. On PostgreSQL a batch is one parameter, the records as JSON,
unpacked by `json_to_recordset`: the statement's text is the same for every batch, so it is
parsed once, and rows and attempts go in together. Elsewhere (embedded SQLite) it is a
multi-row INSERT. Either way a request id stored already (a replay, or another writer's
claim) is skipped by the insert itself (ON CONFLICT DO NOTHING), even a concurrent one.

The conflict target is (request_id, created_at), on both vendors: on PostgreSQL the log is
partitioned by month of created_at, and a unique key there must hold it. A replay carries
the record's own created_at, so it still meets the stored row. Each attempt is written with
its row's created_at, which partitions attempts the same way.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache

import orjson
from django.db import connection
from django.db.models import IntegerField

from core.db import values_placeholders
from core.usage_record import ATTEMPT_FIELDS, LOG_FIELDS, UsageRecord
from usage.models import UsageAttempt, UsageLog

# The log's unique key (UsageLog.Meta): a request id stored already is skipped.
_CONFLICT = "(request_id, created_at)"
_INTEGERS = tuple(
    name for name in LOG_FIELDS if isinstance(UsageLog._meta.get_field(name), IntegerField)
)


def insert_new(records: list[UsageRecord], *, stored_at: datetime) -> dict[str, int]:
    """Insert the records (distinct request ids) and their attempts, in the caller's
    transaction; return the new rows' ids by request id (none for ids stored already)."""
    for record in records:
        check_numbers(record)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_postgres_insert(), [orjson.dumps(records).decode(), stored_at])
            return {request_id: pk for pk, request_id in cursor.fetchall()}
        return _insert_portable(cursor, records, stored_at)


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
    log_columns = ", ".join(_column(UsageLog, name) for name in ("stored_at", *LOG_FIELDS))
    picked = ", ".join(f"r.{connection.ops.quote_name(name)}" for name in LOG_FIELDS)
    attempt_columns = ", ".join(
        _column(UsageAttempt, name) for name in ("log", "created_at", *ATTEMPT_FIELDS)
    )
    attempt_picked = ", ".join(f"a.{connection.ops.quote_name(name)}" for name in ATTEMPT_FIELDS)
    return (
        f"WITH r AS (SELECT * FROM json_to_recordset(%s::json) AS r({_typed(UsageLog, LOG_FIELDS)},"
        " attempts json)),"
        f" logs AS (INSERT INTO {UsageLog._meta.db_table} ({log_columns})"
        f" SELECT %s, {picked} FROM r ON CONFLICT {_CONFLICT} DO NOTHING"
        " RETURNING id, request_id, created_at),"
        f" attempts AS (INSERT INTO {UsageAttempt._meta.db_table} ({attempt_columns})"
        f" SELECT logs.id, logs.created_at, {attempt_picked}"
        " FROM logs JOIN r ON r.request_id = logs.request_id"
        f" CROSS JOIN LATERAL json_to_recordset(r.attempts) AS a("
        f"{_typed(UsageAttempt, ATTEMPT_FIELDS)}) RETURNING 1)"
        " SELECT id, request_id FROM logs"
    )


def _insert_portable(cursor, records: list[UsageRecord], stored_at: datetime) -> dict[str, int]:
    columns = [_column(UsageLog, name) for name in ("stored_at", *LOG_FIELDS)]
    adapt = connection.ops.adapt_datetimefield_value  # e.g. SQLite's text form, as the ORM's
    values: list = []
    for record in records:
        row = [getattr(record, name) for name in LOG_FIELDS]
        values += [adapt(stored_at), *row]
        values[-len(row) + LOG_FIELDS.index("created_at")] = adapt(record.created_at)
    cursor.execute(
        f"INSERT INTO {UsageLog._meta.db_table} ({', '.join(columns)})"
        f" VALUES {values_placeholders(len(records), len(columns))}"
        f" ON CONFLICT {_CONFLICT} DO NOTHING RETURNING id, request_id",
        values,
    )
    ids = {request_id: pk for pk, request_id in cursor.fetchall()}
    attempts = [
        value
        for record in records
        if record.request_id in ids
        for a in record.attempts
        for value in (
            ids[record.request_id],
            adapt(record.created_at),
            *(getattr(a, name) for name in ATTEMPT_FIELDS),
        )
    ]
    if attempts:
        width = 2 + len(ATTEMPT_FIELDS)
        attempt_columns = [
            _column(UsageAttempt, name) for name in ("log", "created_at", *ATTEMPT_FIELDS)
        ]
        cursor.execute(
            f"INSERT INTO {UsageAttempt._meta.db_table} ({', '.join(attempt_columns)})"
            f" VALUES {values_placeholders(len(attempts) // width, width)}",
            attempts,
        )
    return ids
