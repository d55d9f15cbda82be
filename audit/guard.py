"""The database's side of append-only: triggers (audit/migrations/0001_initial.py) refuse
UPDATE and DELETE of entries.

PostgreSQL: a BEFORE UPDATE OR DELETE row trigger raises. TRUNCATE (what Django's flush
runs there, the test runner's between tests included) empties whole tables and is not a row
change; like DROP TABLE it is the database owner's, and the chain's head shows it.

SQLite: the same triggers, RAISE(ABORT). Django's flush empties tables with DELETE there, so
the DELETE trigger lets rows go only while a flush runs: it asks tollgate_audit_flushing(), a
function this app registers on each SQLite connection, which answers 1 inside Django's
flush only. A connection without the function (the sqlite3 shell) cannot delete at all.
"""

from __future__ import annotations

import threading
from typing import Any

_flush = threading.local()


def _flushing() -> int:
    return 1 if getattr(_flush, "active", False) else 0


def register_sqlite_function(sender: Any, connection: Any, **kwargs: Any) -> None:
    """connection_created receiver: give a new SQLite connection tollgate_audit_flushing()."""
    if connection.vendor == "sqlite":
        connection.connection.create_function("tollgate_audit_flushing", 0, _flushing)


def let_sqlite_flush_empty_the_trail() -> None:
    """Mark Django's SQLite flush (and only it) as the one DELETE the trigger lets through:
    PostgreSQL's flush is a TRUNCATE, which row triggers do not see."""
    from django.db import connections

    for connection in connections.all(initialized_only=False):
        if connection.vendor == "sqlite":
            _wrap_flush(type(connection.ops))


def _wrap_flush(operations: Any) -> None:
    if getattr(operations.execute_sql_flush, "_audit_aware", False):
        return
    original = operations.execute_sql_flush

    def execute_sql_flush(self: Any, sql_list: Any) -> None:
        _flush.active = True
        try:
            original(self, sql_list)
        finally:
            _flush.active = False

    execute_sql_flush._audit_aware = True  # type: ignore[attr-defined]
    operations.execute_sql_flush = execute_sql_flush
