"""The usage log partitioned by month (PostgreSQL): rows land in their month's partition (or
the default one, moved out when the month is made) with their attempt trails, partitions are
made ahead and idempotently, retention drops exactly the old months whose rollups were
audited, a replayed row is stored once; SQLite's retention deletes rows in batches; the
migrations convert a populated database keeping every id and every attempt."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from core.usage_record import AttemptRecord
from tests.support.databases import admin_connection, manage, run_on_sqlite
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store
from usage.trail import unpack_trail

LOG = "usage_usagelog"
JAN, FEB, MAR, APR = (datetime(2025, month, 1, tzinfo=UTC) for month in (1, 2, 3, 4))


def attempt(order: int = 1) -> dict:
    return {
        "order": order,
        "provider": "stub-openai",
        "model": "gpt-4o-mini",
        "served_by": "platform",
        "source": "s",
        "outcome": "ok",
        "upstream_status": 200,
        "latency_ms": 3,
        "reservation_id": None,
    }


def rows_at(tenant, *moments: datetime, attempts: int = 2) -> list[dict]:
    return [
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            created_at=moment,
            attempts=[attempt(n) for n in range(1, attempts + 1)],
        )
        for moment in moments
    ]


def placed(table: str) -> dict[str, int]:
    """How many of the test's rows (all in 2025) each partition of `table` holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text, count(*) FROM {table}"
            " WHERE created_at < '2026-01-01 00:00:00+00' GROUP BY 1"
        )
        return dict(cursor.fetchall())


def partitions(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass",
            [table],
        )
        return {name for (name,) in cursor.fetchall()}


@pytest.fixture
def tenant(db):
    return make_tenant()


@requires_postgres
def test_rows_of_each_month_land_in_that_months_partition(tenant):
    from usage.models import UsageLog
    from usage.partitions import ensure_partitions

    ensure_partitions(start=JAN, end=APR)
    store(*rows_at(tenant, JAN + timedelta(days=3), FEB, FEB + timedelta(days=27), MAR))

    assert placed(LOG) == {f"{LOG}_p2025_01": 1, f"{LOG}_p2025_02": 2, f"{LOG}_p2025_03": 1}
    # Each row holds its trail.
    for row in UsageLog.objects.all():
        assert [a.order for a in row.attempts] == [1, 2]


@requires_postgres
def test_ensure_partitions_is_idempotent_and_creates_ahead(db):
    from usage.partitions import add_months, ensure_months_ahead, ensure_partitions, month_of

    created = ensure_partitions(start=datetime(2025, 1, 15, tzinfo=UTC), end=MAR)
    assert created == [f"{LOG}_p2025_01", f"{LOG}_p2025_02"]
    assert ensure_partitions(start=JAN, end=MAR) == []
    # The migration made this month through two ahead; four ahead adds the next two.
    ahead = [add_months(month_of(datetime.now(UTC)), n) for n in (3, 4)]
    assert ensure_months_ahead() == []
    assert ensure_months_ahead(months_ahead=4) == [f"{LOG}_p{month:%Y_%m}" for month in ahead]
    assert ensure_months_ahead(months_ahead=4) == []
    assert {f"{LOG}_p{month:%Y_%m}" for month in ahead} < partitions(LOG)


@requires_postgres
def test_command_makes_past_months_and_tasks_keep_months_ahead(db):
    from django.core.management import call_command

    from usage import tasks

    out = io.StringIO()
    call_command("ensure_usage_partitions", "--from", "2025-05-20", stdout=out)
    assert f"{LOG}_p2025_05" in out.getvalue()
    assert {f"{LOG}_p2025_05", f"{LOG}_p2025_12"} < partitions(LOG)
    call_command("ensure_usage_partitions", "--from", "2025-05-20", stdout=out)
    assert out.getvalue().endswith("all there already\n")

    assert tasks.ensure_partitions() == []  # the migration made them
    # Usage rows are kept forever by default (the billing tables are billing's own tasks).
    assert tasks.apply_retention() == {"cutoff": None, "dropped": [], "deleted_rows": 0}


@requires_postgres
def test_row_of_a_month_without_partition_lands_in_default_and_moves_when_made(tenant):
    from usage.models import UsageLog
    from usage.partitions import ensure_partitions

    june = datetime(2025, 6, 10, 12, tzinfo=UTC)
    rows = rows_at(tenant, june, june + timedelta(hours=1), datetime(2025, 7, 2, tzinfo=UTC))
    store(*rows)
    ids = dict(UsageLog.objects.values_list("request_id", "id"))
    assert placed(LOG) == {f"{LOG}_default": 3}

    assert ensure_partitions(start=june, end=june + timedelta(days=1)) == [f"{LOG}_p2025_06"]

    assert placed(LOG) == {f"{LOG}_p2025_06": 2, f"{LOG}_default": 1}
    assert dict(UsageLog.objects.values_list("request_id", "id")) == ids
    # A moved row keeps its trail.
    assert {len(row.attempts) for row in UsageLog.objects.all()} == {2}
    # The moved rows are still one each: a replay of them is skipped by the unique key.
    store(*rows)
    assert UsageLog.objects.count() == 3


@requires_postgres
def test_replayed_record_is_stored_once_with_one_attempt_set(tenant):
    from core.usage_record import UsageRecord
    from usage.models import UsageLog
    from usage.writer import store_rows

    (row,) = rows_at(tenant, datetime.now(UTC))
    record = UsageRecord.from_json(json.dumps(row).encode())

    assert store_rows([record]) == 1
    assert store_rows([record]) == 0
    assert store_rows([UsageRecord.from_json(json.dumps(row).encode())]) == 0

    (stored,) = UsageLog.objects.filter(request_id=row["request_id"])
    assert [a.order for a in stored.attempts] == [1, 2]


def _audited_to(position: datetime | None) -> None:
    from usage.models import UsageCursor
    from usage.rollups import RECONCILE_CURSOR

    UsageCursor.objects.update_or_create(name=RECONCILE_CURSOR, defaults={"position": position})


def _counts() -> dict:
    return placed(LOG)


@requires_postgres
def test_retention_drops_exactly_the_old_audited_months(tenant):
    from usage.models import UsageRollup
    from usage.partitions import apply_retention, ensure_partitions

    ensure_partitions(start=JAN, end=datetime(2025, 5, 1, tzinfo=UTC))
    store(
        *rows_at(tenant, JAN + timedelta(days=9), JAN + timedelta(days=20)),
        *rows_at(tenant, FEB + timedelta(days=1), FEB + timedelta(days=2), FEB + timedelta(days=3)),
        *rows_at(tenant, *(MAR + timedelta(days=n) for n in range(4))),
        *rows_at(tenant, APR + timedelta(days=10)),
    )
    now = APR + timedelta(days=19)  # 2025-04-20
    rollups_before = UsageRollup.objects.count()

    # 60 days keep everything from 2025-02-19: only January is wholly older. The audit runs
    # first: 31 days from the first row's (Jan 10) to Feb 10, which covers January.
    first = apply_retention(now=now, days=60)

    assert first.dropped == [f"{LOG}_p2025_01"]
    assert first.cutoff == FEB
    assert _counts() == {f"{LOG}_p2025_02": 3, f"{LOG}_p2025_03": 4, f"{LOG}_p2025_04": 1}
    assert f"{LOG}_p2025_01" not in partitions(LOG)
    assert UsageRollup.objects.count() == rollups_before  # totals outlive their rows

    # One day's retention: the audit has reached Mar 13, so February goes, March stays.
    second = apply_retention(now=now, days=1)

    assert second.dropped == [f"{LOG}_p2025_02"]
    assert _counts() == {f"{LOG}_p2025_03": 4, f"{LOG}_p2025_04": 1}


@requires_postgres
def test_retention_waits_for_the_rollup_audit(tenant, monkeypatch):
    import usage.partitions
    from usage.partitions import apply_retention, ensure_partitions

    monkeypatch.setattr(usage.partitions, "reconcile_rollups", lambda **kwargs: [])
    ensure_partitions(start=JAN, end=MAR)
    store(*rows_at(tenant, JAN + timedelta(days=9), FEB + timedelta(days=1)))
    before = _counts()
    now = datetime(2025, 6, 1, tzinfo=UTC)

    assert apply_retention(now=now, days=30).dropped == []  # nothing audited yet
    _audited_to(datetime(2025, 1, 31, tzinfo=UTC))
    assert apply_retention(now=now, days=30).dropped == []  # January's last day is not
    assert _counts() == before

    _audited_to(FEB)
    assert apply_retention(now=now, days=30).dropped == [f"{LOG}_p2025_01"]
    assert _counts() == {f"{LOG}_p2025_02": 1}


@requires_postgres
def test_retention_is_off_by_default_and_deletes_old_rows_left_in_default(tenant, settings):
    from usage.partitions import apply_retention

    assert settings.TOLLGATE["USAGE_RETENTION_DAYS"] == 0
    store(*rows_at(tenant, JAN + timedelta(days=9), FEB + timedelta(days=1)))
    now = datetime(2025, 6, 1, tzinfo=UTC)
    assert apply_retention(now=now).cutoff is None
    assert _counts() == {f"{LOG}_default": 2}

    # No partition for those months (a late row of a dropped month, say): rows in the default
    # partition before the cutoff's month are deleted instead.
    settings.TOLLGATE = {**settings.TOLLGATE, "USAGE_RETENTION_DAYS": 100}
    report = apply_retention(now=now)  # audited to Feb 10: the cutoff is February's start
    assert (report.cutoff, report.dropped, report.deleted_rows) == (FEB, [], 1)
    assert _counts() == {f"{LOG}_default": 1}


def _truncated(moment: datetime, grain: str) -> datetime:
    hour = moment.replace(minute=0, second=0, microsecond=0)
    return hour.replace(hour=0) if grain == "day" else hour


@requires_postgres
def test_migration_converts_a_populated_database_keeping_every_id(throwaway_database):
    name, url = throwaway_database
    # The release before the rollups: their migration backfills them from these rows.
    manage(url, "migrate", "usage", "0007_web_units")
    manage(url, "migrate", "billing", "0005_budget_periods_and_alerts")
    months = [datetime(2025, 10, 5, tzinfo=UTC), datetime(2025, 11, 6, tzinfo=UTC)]
    months.append(datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC))
    with admin_connection(name) as db:
        rows = {}
        for n, moment in enumerate(months * 2):
            request_id = f"req-{uuid.uuid4().hex}"
            (log_id,) = db.execute(
                "INSERT INTO usage_usagelog (request_id, client_request_id, created_at,"
                " stored_at, account_id, group_id, caller_label, route, model_requested,"
                " model_served, provider, served_by, tokens_in, tokens_out, byok_tokens_in,"
                " byok_tokens_out, cache_read_tokens, cache_write_tokens, reasoning_tokens,"
                " provider_cost_micro, bytes_in, bytes_out, bandwidth_charge_micro,"
                " upstream_sent, status, error_code, latency_ms, streamed)"
                " VALUES (%s, '', %s, %s, 1, 2, '', 'chat', 'm', 'm', 'p', 'platform', %s, 0,"
                " 0, 0, 0, 0, 0, 0, 0, 0, 0, true, 200, '', 5, false) RETURNING id",
                [request_id, moment, moment, n],
            ).fetchone()
            for order in (2, 1):  # stored out of order: the trail is in order all the same
                db.execute(
                    'INSERT INTO usage_usageattempt (log_id, "order", provider, model,'
                    " served_by, source, outcome, upstream_status, latency_ms)"
                    " VALUES (%s, %s, 'p', 'm', 'platform', 's', 'ok', 200, %s)",
                    [log_id, order, n * 10 + order],
                )
            rows[log_id] = (request_id, moment, n)
        # A row deleted before the migration: its id was taken, and is not given again.
        (gone,) = db.execute(
            "INSERT INTO usage_usagelog (request_id, client_request_id, created_at, stored_at,"
            " caller_label, route, model_requested, model_served, provider, served_by,"
            " tokens_in, tokens_out, byok_tokens_in, byok_tokens_out, cache_read_tokens,"
            " cache_write_tokens, reasoning_tokens, provider_cost_micro, bytes_in, bytes_out,"
            " bandwidth_charge_micro, upstream_sent, status, error_code, latency_ms, streamed)"
            " VALUES ('gone', '', now(), now(), '', 'chat', '', '', '', '', 0, 0, 0, 0, 0, 0,"
            " 0, 0, 0, 0, 0, false, 200, '', 0, false) RETURNING id"
        ).fetchone()
        db.execute("DELETE FROM usage_usagelog WHERE id = %s", [gone])

    manage(url, "migrate")

    with admin_connection(name) as db:
        stored = {
            log_id: (request_id, created_at, partition)
            for log_id, request_id, created_at, partition in db.execute(
                "SELECT id, request_id, created_at, tableoid::regclass::text FROM usage_usagelog"
            )
        }
        assert stored == {
            log_id: (request_id, moment, f"{LOG}_p{moment:%Y_%m}")
            for log_id, (request_id, moment, _) in rows.items()
        }
        # Each row's attempts are its trail now; their table is gone.
        trails = dict(db.execute("SELECT id, attempt_trail FROM usage_usagelog"))
        assert {log_id: unpack_trail(trail) for log_id, trail in trails.items()} == {
            log_id: tuple(
                AttemptRecord(order, "p", "m", "platform", "s", "ok", 200, n * 10 + order)
                for order in (1, 2)
            )
            for log_id, (_, _, n) in rows.items()
        }
        assert db.execute("SELECT to_regclass('usage_usageattempt')").fetchone() == (None,)
        (kind,) = db.execute("SELECT relkind FROM pg_class WHERE relname = %s", [LOG]).fetchone()
        assert kind == "p"
        assert not db.execute(
            "SELECT 1 FROM pg_class WHERE relname LIKE '%\\_unpartitioned'"
        ).fetchall()
        # Ids go on after the last one taken; a new row (of any month) inserts.
        new_id, partition = db.execute(
            "INSERT INTO usage_usagelog (request_id, client_request_id, created_at, stored_at,"
            " caller_label, route, model_requested, model_served, provider, served_by,"
            " tokens_in, tokens_out, byok_tokens_in, byok_tokens_out, cache_read_tokens,"
            " cache_write_tokens, reasoning_tokens, provider_cost_micro, bytes_in, bytes_out,"
            " bandwidth_charge_micro, upstream_sent, status, error_code, latency_ms, streamed)"
            " VALUES ('new', '', now(), now(), '', 'chat', '', '', '', '', 0, 0, 0, 0, 0, 0,"
            " 0, 0, 0, 0, 0, false, 200, '', 0, false)"
            " RETURNING id, tableoid::regclass::text"
        ).fetchone()
        assert new_id == gone + 1
        assert partition == f"{LOG}_p{datetime.now(UTC):%Y_%m}"
        (sequence,) = db.execute("SELECT pg_get_serial_sequence(%s, 'id')", [LOG]).fetchone()
        assert sequence == f"public.{LOG}_id_seq"
        # The web unit columns kept their database default (a writer of the release before
        # inserts without them).
        (default,) = db.execute(
            "SELECT web_pages FROM usage_usagelog WHERE request_id = 'new'"
        ).fetchone()
        assert default == 0
        # No varchar_pattern_ops twin is left on the request tables.
        twins = db.execute(
            "SELECT indexname FROM pg_indexes WHERE indexname LIKE '%\\_like'"
            " AND tablename IN ('usage_usagelog', 'usage_usagedeadletter', 'billing_reservation',"
            " 'billing_spendhold', 'billing_settledrequest')"
        ).fetchall()
        assert twins == []
        # The rollups were backfilled from the rows: each moment holds two of them.
        for table, grain in (("usage_usagerollup", "hour"), ("usage_usagedailyrollup", "day")):
            rollups = db.execute(
                f"SELECT {grain}, account_id, group_id, api_key_id, requests, errors, tokens_in"
                f" FROM {table} ORDER BY {grain}"
            ).fetchall()
            assert rollups == [
                (_truncated(moment, grain), 1, 2, 0, 2, 0, i + (i + 3))
                for i, moment in enumerate(months)
            ]


SQLITE_SCRIPT = """
import json
from dataclasses import astuple
from datetime import UTC, datetime

import django
import orjson

django.setup()
from django.core.management import call_command
from django.db import connection

call_command("migrate", "usage", "0008_usage_rollup", verbosity=0)
with connection.cursor() as cursor:
    cursor.execute(
        "INSERT INTO usage_usagelog (request_id, client_request_id, created_at, stored_at,"
        " caller_label, route, model_requested, model_served, provider, served_by, tokens_in,"
        " tokens_out, byok_tokens_in, byok_tokens_out, cache_read_tokens, cache_write_tokens,"
        " reasoning_tokens, provider_cost_micro, bytes_in, bytes_out, bandwidth_charge_micro,"
        " upstream_sent, status, error_code, latency_ms, streamed) VALUES ('before', '',"
        " '2024-12-05 10:00:00', '2024-12-05 10:00:00', '', 'chat', '', '', '', '', 0, 0, 0,"
        " 0, 0, 0, 0, 0, 0, 0, 0, 0, 200, '', 0, 0)"
    )
    cursor.execute(
        'INSERT INTO usage_usageattempt (log_id, "order", provider, model, served_by, source,'
        " outcome, upstream_status, latency_ms) VALUES (1, 2, 'p', 'm', 'platform', 's', 'ok',"
        " 200, 5)"
    )
call_command("migrate", "usage", "0011_attempt_key_label", verbosity=0)
with connection.cursor() as cursor:
    cursor.execute("SELECT created_at FROM usage_usageattempt")
    migrated = cursor.fetchone()[0].isoformat()
    # A first try stored after the second: the trail is in order all the same.
    cursor.execute(
        'INSERT INTO usage_usageattempt (log_id, "order", provider, model, served_by, source,'
        " outcome, upstream_status, latency_ms, created_at, key_label) VALUES (1, 1, 'p', 'm',"
        " 'team', 's:team', 'timeout', NULL, 30000, '2024-12-05 10:00:00', 'team-a')"
    )
call_command("migrate", verbosity=0)

import usage.partitions
from core.usage_record import UsageRecord
from usage.models import UsageLog
from usage.partitions import apply_retention, ensure_partitions
from usage.writer import store_rows

trail = [astuple(a) for a in UsageLog.objects.get(request_id="before").attempts]
rows = json.loads(ROWS)
records = [UsageRecord.from_json(orjson.dumps(row)) for row in rows]
stored = [store_rows(records), store_rows(records)]
usage.partitions.DELETE_BATCH = 2
runs = []
for _ in range(2):
    report = apply_retention(now=datetime(2025, 4, 20, tzinfo=UTC), days=60)
    runs.append({
        "cutoff": report.cutoff.isoformat(),
        "deleted_rows": report.deleted_rows,
        "logs": sorted(UsageLog.objects.values_list("request_id", flat=True)),
        "attempts": sorted(row.request_id for row in UsageLog.objects.all() for _ in row.attempts),
    })
print(json.dumps({
    "migrated_attempt_created_at": migrated,
    "migrated_trail": trail,
    "stored": stored,
    "partitions": ensure_partitions(start=datetime(2025, 1, 1), end=datetime(2025, 6, 1)),
    "runs": runs,
}))
"""


def test_retention_on_sqlite_deletes_old_rows_and_attempts_in_batches(tmp_path):
    rows = [
        journal_row(
            group_id=1,
            account_id=1,
            request_id=f"{moment:%m-%d}",
            created_at=moment,
            attempts=[attempt(1), attempt(2)],
        )
        for moment in (
            *(datetime(2025, 1, day, tzinfo=UTC) for day in (10, 11, 12, 20, 31)),
            datetime(2025, 2, 9, 23, tzinfo=UTC),
            datetime(2025, 2, 10, 1, tzinfo=UTC),
            datetime(2025, 3, 1, tzinfo=UTC),
        )
    ]
    report = run_on_sqlite(f"ROWS = {json.dumps(json.dumps(rows))}\n{SQLITE_SCRIPT}", tmp_path)

    # Migration 0009 gave the attempt stored before it its row's created_at; 0012 put the
    # row's attempts, in order, in its trail.
    assert report["migrated_attempt_created_at"] == "2024-12-05T10:00:00"  # SQLite: UTC
    assert report["migrated_trail"] == [
        [1, "p", "m", "team", "s:team", "timeout", None, 30000, None, "team-a"],
        [2, "p", "m", "platform", "s", "ok", 200, 5, None, ""],
    ]
    assert report["stored"] == [8, 0]  # a replay stores nothing
    assert report["partitions"] == []
    # 60 days before Apr 20 is Feb 19, but each run audits 31 more days from the first row's
    # (Dec 5): the first run's cutoff is Jan 5, the second's Feb 5. Rows go one by one.
    first, second = report["runs"]
    assert (first["cutoff"], first["deleted_rows"]) == ("2025-01-05T00:00:00+00:00", 1)
    assert first["logs"] == sorted(row["request_id"] for row in rows)
    assert first["attempts"] == sorted(row["request_id"] for row in rows for _ in range(2))
    assert (second["cutoff"], second["deleted_rows"]) == ("2025-02-05T00:00:00+00:00", 5)
    assert second["logs"] == ["02-09", "02-10", "03-01"]
    assert second["attempts"] == ["02-09", "02-09", "02-10", "02-10", "03-01", "03-01"]
