"""Wait until what a Tollgate process needs answers, then exit 0 (1 past --timeout).

compose.yaml runs it before each process (and migrate before migrating) instead of relying on
health conditions, which podman-compose on podman < 4.6 ignores: PostgreSQL accepts this
process's login, Redis answers, and (unless --no-schema) the database carries every migration
this release ships and this role may read every table, i.e. migrate and grant_app_role ran.
"""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection

from gateway.startup import pending_migrations


def first_problem(*, schema: bool) -> str | None:
    """Say what is not ready yet, in one line, or return None."""
    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        connection.close()
        return f"PostgreSQL: {_one_line(exc)}"
    if settings.REDIS_URL:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
        try:
            client.ping()
        except redis.RedisError as exc:
            return f"Redis: {_one_line(exc)}"
        finally:
            client.close()
    if not schema:
        return None
    try:
        pending = pending_migrations()
        unreadable = _unreadable_tables() if connection.vendor == "postgresql" else []
    except DatabaseError as exc:
        connection.close()
        return f"PostgreSQL: {_one_line(exc)}"
    if pending:
        return f"{len(pending)} migration(s) not applied yet ({pending[0]}, ...): migrate runs them"
    if unreadable:
        return f"this role may not read {', '.join(unreadable)}: grant_app_role has not run yet"
    return None


def _unreadable_tables() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
            " AND NOT has_table_privilege(c.oid, 'SELECT') ORDER BY c.relname LIMIT 3"
        )
        return [name for (name,) in cursor.fetchall()]


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class Command(BaseCommand):
    help = "Wait for PostgreSQL, Redis and (unless --no-schema) a migrated, granted database."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-schema",
            action="store_true",
            help="Wait for the connections only (the migrate service itself).",
        )
        parser.add_argument(
            "--timeout", type=float, default=600, help="Give up after this many seconds."
        )

    def handle(self, *args, no_schema: bool, timeout: float, **options):
        started = time.monotonic()
        said = None
        while (problem := first_problem(schema=not no_schema)) is not None:
            waited = time.monotonic() - started
            if waited >= timeout:
                raise CommandError(f"not ready after {waited:.0f} s: {problem}")
            if problem != said:  # each new reason once, not a line a second
                self.stderr.write(f"waiting: {problem}")
                said = problem
            time.sleep(1)
        self.stdout.write(f"ready after {time.monotonic() - started:.0f} s")
