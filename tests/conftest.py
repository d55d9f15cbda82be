"""Pytest hooks and fixtures of the test suite; the harness itself is tests/support."""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit

import pytest

from tests.support.databases import throwaway_database  # noqa: F401  (a fixture)
from tests.support.passwords import hash_passwords_quickly
from tests.support.processes import (
    Gateway,
    RedisServer,
    child_database_url,
    free_port,
    start_gateway,
    start_stub,
)
from tests.support.profiles import install_profiles
from tests.support.rates import RateWindow
from tests.support.services import HAS_REDIS, IS_POSTGRES, clear_shared_state
from tests.support.stacks import Stack, own_stack
from tests.support.tcp_relay import TcpRelay
from tests.support.tls import share_default_contexts


def pytest_configure(config):
    share_default_contexts()
    hash_passwords_quickly()
    _retry_flush_on_deadlock()
    _flush_only_tables_with_rows()


def _retry_flush_on_deadlock() -> None:
    """Let the flush that ends a `transactional_db` test retry when PostgreSQL deadlocks.

    Why a patch of Django's TransactionTestCase, the one in the suite: the gateways of
    session- and module-scoped fixtures (shared_gateway, module_gateways) outlive the test,
    and keep storing its usage rows (the journal flush, every TOLLGATE_USAGE_FLUSH_MS, with
    its settlement) while the flush TRUNCATEs every table; PostgreSQL may then pick the
    TRUNCATE as the deadlock's victim, and the test errors in teardown. Waiting for those
    gateways to go quiet first narrows that window but cannot close it (a flush can start
    right after the wait), and pytest-django builds its test case from
    django.test.TransactionTestCase itself, so neither a fixture nor a subclass can retry
    the flush. Only a flush that failed on a database error (a deadlock) is retried.
    """
    from django.core.management.base import CommandError
    from django.db import OperationalError
    from django.test import TransactionTestCase

    original = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]  # private

    def teardown(self):
        for attempt in range(6):
            try:
                return original(self)
            except CommandError as exc:  # "couldn't be flushed", caused by a deadlock
                if attempt == 5 or not isinstance(exc.__cause__, OperationalError):
                    raise
                time.sleep(0.2)

    TransactionTestCase._fixture_teardown = teardown  # type: ignore[attr-defined]  # private


def _flush_only_tables_with_rows() -> None:
    """Make the flush that ends a `transactional_db` test empty only the tables holding rows,
    on PostgreSQL, with DELETE, and refill the content types and permissions (post_migrate)
    only when they changed.

    Why: Django's flush TRUNCATEs every table of every app (over a hundred), and a TRUNCATE
    makes new files for each table and index (each partition's too), whether it held rows or
    not: 1-3 s a test on CI's machine; then post_migrate writes the content types and
    permissions it has just truncated again (~0.3 s). Even a TRUNCATE of only the tables
    holding rows cascaded to every table referencing them: 0.23 s after a test that made one
    tenant, against 0.05 s for DELETEs of the same rows. Every table holding rows is emptied,
    so no reference is left dangling, and the foreign keys' and the append-only tables'
    triggers are set aside for that one transaction (`session_replication_role`: the suite's
    database user is a superuser, as CI's is). The tables are the ones Django's flush names,
    and after it each one holds what it held after Django's flush: nothing, or for the
    content types and permissions, the rows post_migrate makes (the very rows of the last
    full flush, when a fingerprint of the two tables says nothing changed them; only their
    ids are not new). Other flushes (`manage.py flush`, `call_command("flush")`) are left
    alone.
    """
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType
    from django.core.management.commands import flush
    from django.db import connections
    from django.test import TransactionTestCase

    # flush.py's own imports of them (the names it calls), which django-stubs does not declare.
    everything = flush.sql_flush  # type: ignore[attr-defined]  # see above
    emit = flush.emit_post_migrate_signal  # type: ignore[attr-defined]  # see above
    refilled = sorted({ContentType._meta.db_table, Permission._meta.db_table})
    # The two tables' fingerprint as post_migrate left them after the last full flush, when
    # they were the only tables holding rows then ({} until then, or when others did).
    made: dict[str, str] = {}
    unchanged = [False]  # this flush kept them as post_migrate made them

    def filled(connection) -> list[str]:
        tables = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        quote = connection.ops.quote_name
        probe = " UNION ALL ".join(
            f"SELECT %s WHERE EXISTS (SELECT 1 FROM {quote(table)})" for table in tables
        )
        with connection.cursor() as cursor:
            cursor.execute(probe, tables)
            return [row[0] for row in cursor.fetchall()]

    def fingerprint(connection) -> dict[str, str]:
        quote = connection.ops.quote_name
        query = " UNION ALL ".join(
            f"SELECT %s, md5(coalesce(string_agg(r::text, ',' ORDER BY r::text), ''))"
            f" FROM {quote(table)} r"
            for table in refilled
        )
        with connection.cursor() as cursor:
            cursor.execute(query, refilled)
            return dict(cursor.fetchall())

    def with_rows(style, connection, reset_sequences=True, allow_cascade=False):
        unchanged[0] = False
        if connection.vendor != "postgresql" or reset_sequences:
            return everything(
                style, connection, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        holding = filled(connection)
        if made and fingerprint(connection) == made:
            unchanged[0] = True
            holding = [table for table in holding if table not in made]
        if not holding:
            if unchanged[0]:
                return []  # nothing to empty, nothing to refill (flush skips post_migrate)
            return everything(style, connection, reset_sequences=False, allow_cascade=False)
        quote = connection.ops.quote_name
        return [
            "SET LOCAL session_replication_role = replica;",
            *(f"DELETE FROM {quote(table)};" for table in holding),
        ]

    def post_migrate(verbosity, interactive, db, **kwargs):
        connection = connections[db]
        if unchanged[0] and fingerprint(connection) == made:
            return
        emit(verbosity, interactive, db, **kwargs)
        made.clear()
        if connection.vendor == "postgresql" and sorted(filled(connection)) == refilled:
            made.update(fingerprint(connection))

    original = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]  # private

    def teardown(self):
        flush.sql_flush, flush.emit_post_migrate_signal = with_rows, post_migrate
        try:
            return original(self)
        finally:
            flush.sql_flush, flush.emit_post_migrate_signal = everything, emit

    TransactionTestCase._fixture_teardown = teardown  # type: ignore[attr-defined]  # private


def pytest_sessionstart(session):
    if os.environ.get("TEST_REQUIRE_SERVICES") == "1" and not (HAS_REDIS and IS_POSTGRES):
        pytest.exit("TEST_REQUIRE_SERVICES=1 but DATABASE_URL / REDIS_URL are not both set", 2)


@pytest.fixture(scope="session")
def stub():
    server = start_stub()
    yield server
    server.proc.terminate()
    server.proc.wait(10)


@pytest.fixture(scope="session")
def gateway_factory(tmp_path_factory, django_db_setup, django_db_blocker):
    started: list[Gateway] = []

    def factory(**env: str) -> Gateway:
        tmp = tmp_path_factory.mktemp("gw")
        gateway = start_gateway(tmp, **env)  # type: ignore[arg-type]  # variables, not workers
        started.append(gateway)
        return gateway

    yield factory
    for gateway in started:
        gateway.stop()


@pytest.fixture
def spawn_gateway(gateway_factory):
    """Start gateways for one test; they are stopped when it ends (connections are finite)."""
    started: list[Gateway] = []

    def spawn(**env: str) -> Gateway:
        gateway = gateway_factory(**env)
        started.append(gateway)
        return gateway

    yield spawn
    for gateway in started:
        gateway.stop()


@pytest.fixture(scope="session")
def shared_gateway(gateway_factory):
    return gateway_factory()


@pytest.fixture
def stack(transactional_db, shared_gateway, stub) -> Stack:
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    shared_gateway.reload()
    return Stack(gateway=shared_gateway, stub=stub)


@pytest.fixture
def rate_window() -> RateWindow:
    """A rate window that starts now: start the test's fleet with its `env` to own it."""
    return RateWindow.fresh()


@pytest.fixture
def fresh_window_stack(transactional_db, spawn_gateway, stub, rate_window) -> Stack:
    """A gateway of the test's own, in its first rate window (`rate_window`) as it starts."""
    return own_stack(spawn_gateway(**rate_window.env), stub)


@pytest.fixture
def own_redis():
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("needs the redis-server binary")
    server = RedisServer(port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tolerant_gateway(gateway_factory):
    """A gateway whose breakers never open: for tests that inject upstream failures."""
    return gateway_factory(TOLLGATE_BREAKER_FAILURES="1000000")


@pytest.fixture(scope="module")
def module_gateways(gateway_factory):
    """Start gateways for one test module (gateway_factory's env overrides); they stop when
    the module is done, so a long run never holds every gateway's connections at once."""
    started: list[Gateway] = []

    def start(**env: str) -> Gateway:
        gateway = gateway_factory(**env)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


@pytest.fixture
def database_relay():
    """A TCP relay between a process and PostgreSQL, for a database cut of that process alone;
    yields the relay and the database URL through it."""
    url = urlsplit(child_database_url())
    relay = TcpRelay(url.hostname or "127.0.0.1", url.port or 5432)
    auth = url.netloc.rpartition("@")[0]
    via = f"127.0.0.1:{relay.port}"
    yield relay, url._replace(netloc=f"{auth}@{via}" if auth else via).geturl()
    relay.stop()


@pytest.fixture
def announced():
    """What this process hears on the config bus while the test runs (as a replica would).
    A write's announcements wait for its commit: run its writes inside
    django_capture_on_commit_callbacks(execute=True) where the test holds a transaction."""
    from core import bus

    heard: list[tuple[str, dict]] = []
    listeners = {
        topic: (lambda payload, topic=topic: heard.append((topic, payload)))
        for topic in (bus.Topic.GROUP, bus.Topic.API_KEY, bus.Topic.CACHE_PURGE)
    }
    for topic, listener in listeners.items():
        bus.subscribe(topic, listener)
    yield heard
    for topic, listener in listeners.items():
        bus._subscribers[topic].remove(listener)
