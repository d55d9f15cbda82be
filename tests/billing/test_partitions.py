"""The per-request billing tables partitioned by slice of a month of their time-ordered
request ids (PostgreSQL): a request's hold, reservations and settled marker land in its
slice's partition and an old random id in the default one; a request is still charged once;
partitions are made from this slice on only, never inside a month's partition made before
slices; retention (a week by default) drops a closed slice whole, keeps one with an open
row, never goes under 7 days, and leaves the ledger (the balances' history) whole; SQLite
deletes closed rows instead; the migrations convert a populated database keeping every id,
and a fresh one has slices only."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from billing.ledger.charges import Charge, charge
from billing.ledger.holds import Hold, release_holds, take_hold
from billing.ledger.wallet import cancel_reservation, commit_reservations, reserve
from billing.models import LedgerEntry, Reservation, SettledRequest, SpendHold, Wallet
from core.ids import time_ordered_id
from core.sqlexec import run_sync
from tests.support.databases import admin_connection, manage, run_on_sqlite
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

HOLD, RESERVATION, SETTLED = (
    SpendHold._meta.db_table,
    Reservation._meta.db_table,
    SettledRequest._meta.db_table,
)
TABLES = (HOLD, RESERVATION, SETTLED)
JAN, FEB, MAR, APR = (datetime(2025, month, 1, tzinfo=UTC) for month in (1, 2, 3, 4))
SLICES = ("01", "05", "09", "13", "17", "21", "25", "28")  # the days a month's slices start on


def minted(moment: datetime) -> str:
    return time_ordered_id(int(moment.timestamp() * 1_000_000_000))


def placed(table: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1")
        return dict(cursor.fetchall())


def partitions(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass",
            [table],
        )
        return {name for (name,) in cursor.fetchall()}


def served(tenant, request_id: str, *, cost: int, settle: bool = True) -> int:
    """A platform request through the ledger's own programs: its hold and reservation taken,
    then (`settle`) the reservation committed, the hold released and the request charged.
    Returns the reservation's id."""
    now = timezone.now()
    hold = Hold(request_id, tenant.group_id, tenant.api_key_id, False, 1_000)
    run_sync(take_hold(hold, now=now, ttl_s=60))
    reservation_id = run_sync(
        reserve(
            account_id=tenant.account_id,
            request_id=request_id,
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            attempt_no=1,
            amount_micro=1_000,
            now=now,
            ttl_s=60,
        )
    )
    if settle:
        run_sync(commit_reservations({reservation_id: (request_id, cost)}, now=now))
        run_sync(release_holds([request_id]))
        owed = Charge(request_id, tenant.group_id, tenant.api_key_id, cost_micro=cost)
        assert run_sync(charge([owed], source="settle", now=now)) == {request_id}
    return reservation_id


@pytest.fixture
def tenant(db):
    return make_tenant(wallet_micro=1_000_000)


@requires_postgres
def test_a_requests_rows_land_in_its_months_partition_and_it_is_charged_once(tenant):
    from billing.partitions import ensure_partitions

    assert ensure_partitions(start=JAN, end=MAR, now=JAN) == [
        f"{table}_p2025_{month}_{day}"
        for table in TABLES
        for month in ("01", "02")
        for day in SLICES
    ]
    february, legacy = minted(FEB + timedelta(days=3, hours=5)), uuid.uuid4().hex
    for request_id in (february, legacy):
        served(tenant, request_id, cost=300)

    for table in TABLES:
        assert placed(table) == {f"{table}_p2025_02_01": 1, f"{table}_default": 1}
    # The marker's unique key holds across partitions: a second charge (reconciliation's,
    # the reaper's) of either request charges nothing.
    spent = tenant_spent(tenant)
    for request_id in (february, legacy):
        again = Charge(request_id, tenant.group_id, tenant.api_key_id, cost_micro=300)
        assert run_sync(charge([again], source="reconcile", now=timezone.now())) == set()
    assert tenant_spent(tenant) == spent == 600
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == 1_000_000 - 600


def tenant_spent(tenant) -> int:
    from accounts.models import Group

    return Group.objects.get(pk=tenant.group_id).spent_micro


@requires_postgres
def test_partitions_are_made_from_this_slice_on_and_take_their_rows_from_default(tenant):
    from billing.partitions import add_months, ensure_months_ahead, ensure_partitions, month_of
    from core.partitions import slice_of

    now = datetime.now(UTC)
    this_month = month_of(now)
    # Never a slice before this one: an old random id there could go before it is due.
    assert ensure_partitions(start=JAN, end=add_months(this_month, 1)) == []
    assert not any(name.startswith(f"{HOLD}_p2025_01") for name in partitions(HOLD))
    # A fresh database has slices only (billing 0014 split the empty months 0007 made),
    # from this slice on.
    for table in TABLES:
        made = sorted(partitions(table) - {f"{table}_default"})
        assert made[0] == f"{table}_p{slice_of(now):%Y_%m_%d}"
        assert all(len(name) == len(f"{table}_p2025_01_01") for name in made), made

    # An id of four months ahead sits in the default partition until its slice is made.
    ahead = add_months(this_month, 4)
    early = minted(ahead + timedelta(days=1))
    served(tenant, early, cost=5)
    assert ensure_months_ahead() == []  # the migrations made this month through two ahead
    made = ensure_months_ahead(months_ahead=4)
    assert made == [
        f"{table}_p{month:%Y_%m}_{day}"
        for table in TABLES
        for month in (add_months(this_month, 3), ahead)
        for day in SLICES
    ]
    assert ensure_months_ahead(months_ahead=4) == []
    for table in TABLES:
        assert placed(table) == {f"{table}_p{ahead:%Y_%m}_01": 1}
    assert SettledRequest.objects.get(request_id=early).provider_cost_micro == 5


@requires_postgres
def test_beat_tasks_keep_slices_ahead_and_drop_working_state_past_a_week(db):
    from billing import tasks

    assert tasks.ensure_partitions() == []  # the migrations made this month through two ahead
    report = tasks.apply_retention()
    # The billing tables' working state is kept a week by default: nothing to drop yet.
    assert report.pop("cutoff") < (datetime.now(UTC) - timedelta(days=6)).isoformat()
    assert report == {"dropped": [], "kept_open": [], "deleted_rows": 0}


@requires_postgres
def test_retention_drops_closed_months_whole_and_keeps_open_ones(tenant, settings):
    from billing.partitions import apply_retention, ensure_partitions

    ensure_partitions(start=JAN, end=APR, now=JAN)
    january = [minted(JAN + timedelta(days=day)) for day in (2, 20)]
    open_in_february = minted(FEB + timedelta(days=10))
    march = minted(MAR + timedelta(days=27))
    old_legacy, open_legacy, new_legacy = (uuid.uuid4().hex for _ in range(3))
    for request_id in (*january, march, old_legacy, new_legacy):
        served(tenant, request_id, cost=100)
    pending = served(tenant, open_in_february, cost=0, settle=False)
    served(tenant, open_legacy, cost=0, settle=False)
    long_ago = datetime(2025, 1, 1, tzinfo=UTC)  # before the cutoff below
    for model in (SpendHold, Reservation, SettledRequest):
        model.objects.filter(request_id__in=[old_legacy, open_legacy]).update(created_at=long_ago)
    # As if committed long ago: a table with foreign-key checks still pending in this
    # (the test's) transaction cannot be dropped.
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    ledger_before = list(LedgerEntry.objects.values_list("id", "amount_micro", "reservation_id"))
    wallet_before = Wallet.objects.values_list("balance_micro", "reserved_micro").get()

    # A week by default; 0 keeps everything.
    assert settings.TOLLGATE["BILLING_STATE_RETENTION_DAYS"] == 7
    assert apply_retention(now=APR + timedelta(days=4), days=0).cutoff is None

    # One day asked, seven kept: the cutoff is Mar 29, so every slice ending by then goes
    # but February's third (from the 9th), which stays for its open reservation and hold;
    # March's last (the 28th to Apr 1) is not all past yet.
    report = apply_retention(now=APR + timedelta(days=4), days=1)

    assert report.cutoff == datetime(2025, 3, 29, tzinfo=UTC)
    due = [
        f"2025_{month}_{day}"
        for month in ("01", "02", "03")
        for day in SLICES
        if (month, day) not in {("02", "09"), ("03", "28")}
    ]
    assert report.dropped == [f"{table}_p{piece}" for piece in due for table in TABLES]
    assert report.kept_open == ["2025-02-09"]
    # The default partition loses only its closed rows of before the cutoff.
    assert report.deleted_rows == 3  # the old legacy request's hold, reservation and marker
    for table in TABLES:
        left = {name for name in partitions(table) if name.startswith(f"{table}_p2025")}
        assert left == {f"{table}_p2025_02_09", f"{table}_p2025_03_28"}
    assert set(SettledRequest.objects.values_list("request_id", flat=True)) == {
        march,
        new_legacy,
    }
    assert set(SpendHold.objects.values_list("request_id", flat=True)) == {
        open_in_february,
        march,
        new_legacy,
        open_legacy,
    }
    assert Reservation.objects.get(pk=pending).status == Reservation.Status.PENDING
    # The ledger is the balances' history: every entry stays, its reservation link too.
    assert list(LedgerEntry.objects.values_list("id", "amount_micro", "reservation_id")) == (
        ledger_before
    )
    assert Wallet.objects.values_list("balance_micro", "reserved_micro").get() == wallet_before

    # Once February's request is resolved, its month goes too.
    run_sync(cancel_reservation(pending, now=timezone.now()))
    run_sync(release_holds([open_in_february]))
    later = apply_retention(now=APR + timedelta(days=4), days=1)
    assert (later.dropped, later.kept_open) == ([f"{t}_p2025_02_09" for t in TABLES], [])


@requires_postgres
def test_reaper_queries_can_use_the_partial_indexes(db):
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        # Tables this small are read whole; forbid that, so the plan shows whether the
        # partial index's condition matches the reaper's query at all.
        cursor.execute("SET LOCAL enable_seqscan = off")
        plans = {
            "reservation_open_expiry": Reservation.objects.filter(
                status=Reservation.Status.PENDING, expires_at__lt=now
            ).explain(),
            "spend_hold_open_expiry": SpendHold.objects.filter(
                status=SpendHold.Status.HELD, expires_at__lt=now
            ).explain(),
        }
        for parent, plan in plans.items():
            used = set(re.findall(r"Index (?:Only )?Scan using (\S+)", plan))
            assert used, plan
            # Each partition's index is the partitioned index's own.
            cursor.execute(
                "SELECT DISTINCT inhparent::regclass::text FROM pg_inherits"
                " WHERE inhrelid = ANY(%s::regclass[])",
                [sorted(used)],
            )
            assert cursor.fetchall() == [(parent,)]


def first_statement(program) -> tuple[str, tuple]:
    sql, params, *_ = next(program)
    return sql, params


@requires_postgres
@pytest.mark.parametrize(
    "table, statement",
    [
        (
            RESERVATION,
            lambda ids: commit_reservations(
                {n: (request_id, 5) for n, request_id in enumerate(ids)}, now=timezone.now()
            ),
        ),
        (HOLD, lambda ids: release_holds(ids)),
    ],
    ids=["commit_reservations", "release_holds"],
)
def test_a_settle_batch_reads_only_the_partitions_its_requests_span(db, table, statement):
    """The gateway's driver prepares statements, and after five runs PostgreSQL may keep a
    generic plan: the batch's bounds must prune partitions in that plan too."""
    from core.partitions import slice_of

    this_month = datetime.now(UTC)
    ids = [minted(this_month + timedelta(seconds=n)) for n in range(3)]
    sql, params = first_statement(statement(ids))
    numbered = iter(range(1, len(params) + 1))
    prepared = re.sub(r"%s", lambda _: f"${next(numbered)}", sql)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE settle_batch AS {prepared}")
        try:
            placeholders = ", ".join(["%s"] * len(params))
            cursor.execute(f"EXPLAIN EXECUTE settle_batch({placeholders})", params)
            plan = "\n".join(row for (row,) in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE settle_batch")
    kept = len(partitions(table))
    assert kept >= 4, plan  # this month's slices, two months' ahead, and the default
    # Tables scanned (a bitmap index scan names its index, not its table).
    scanned = set(re.findall(rf"(?<!Bitmap Index )Scan (?:using \S+ )?on ({table}_\w+)", plan))
    assert scanned == {f"{table}_p{slice_of(this_month):%Y_%m_%d}"}, plan
    assert f"Subplans Removed: {kept - 1}" in plan, plan


@requires_postgres
def test_migration_converts_populated_billing_tables_keeping_every_id(throwaway_database):
    name, url = throwaway_database
    manage(url, "migrate", "billing", "0006_lean_request_indexes")
    this_month = minted(datetime.now(UTC))
    with admin_connection(name) as db:
        (account,) = db.execute(
            "INSERT INTO accounts_account (name, billing_mode, bandwidth_price_micro_per_gb,"
            " markup_bp, created_at, budget_alert_pcts, time_zone)"
            " VALUES ('a', 'prepaid', 0, 0, now(), '[]', 'UTC') RETURNING id"
        ).fetchone()
        (wallet,) = db.execute(
            "INSERT INTO billing_wallet (account_id, balance_micro, reserved_micro, updated_at)"
            " VALUES (%s, 1000, 0, now()) RETURNING id",
            [account],
        ).fetchone()
        rows = {}
        for request_id in (uuid.uuid4().hex, uuid.uuid4().hex, this_month):
            (reservation,) = db.execute(
                "INSERT INTO billing_reservation (wallet_id, request_id, attempt_no, call_sent,"
                " unmeasured, amount_micro, committed_micro, excess_micro, status, created_at,"
                " expires_at) VALUES (%s, %s, 1, true, false, 10, 4, 0, 'committed', now(),"
                " now()) RETURNING id",
                [wallet, request_id],
            ).fetchone()
            (entry,) = db.execute(
                "INSERT INTO billing_ledgerentry (wallet_id, kind, amount_micro,"
                " balance_after_micro, reservation_id, reason, created_at)"
                " VALUES (%s, 'commit', -4, 996, %s, '', now()) RETURNING id",
                [wallet, reservation],
            ).fetchone()
            (marker,) = db.execute(
                "INSERT INTO billing_settledrequest (request_id, group_id, bandwidth_micro,"
                " provider_cost_micro, source, created_at) VALUES (%s, 1, 0, 4, 'settle', now())"
                " RETURNING id",
                [request_id],
            ).fetchone()
            rows[request_id] = (reservation, entry, marker)

    manage(url, "migrate")

    month = f"p{datetime.now(UTC):%Y_%m}"
    with admin_connection(name) as db:
        for table in (RESERVATION, SETTLED, HOLD):
            (kind,) = db.execute(
                "SELECT relkind FROM pg_class WHERE relname = %s", [table]
            ).fetchone()
            assert kind == "p"
        reservations = {
            request_id: (id_, partition)
            for id_, request_id, partition in db.execute(
                f"SELECT id, request_id, tableoid::regclass::text FROM {RESERVATION}"
            )
        }
        markers = {
            request_id: (id_, partition)
            for id_, request_id, partition in db.execute(
                f"SELECT id, request_id, tableoid::regclass::text FROM {SETTLED}"
            )
        }
        where = {rid: "default" if rid != this_month else month for rid in rows}
        # This month's partition holds a row: it stays a month, and no slice is made
        # inside it; the empty months ahead became slices (billing 0014).
        made = {
            n
            for (n,) in db.execute(
                "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass",
                [SETTLED],
            )
        }
        next_month = (datetime.now(UTC).replace(day=1) + timedelta(days=32)).replace(day=1)
        assert f"{SETTLED}_{month}" in made
        assert f"{SETTLED}_p{next_month:%Y_%m}_01" in made
        assert f"{SETTLED}_p{next_month:%Y_%m}" not in made
        assert not any(n.startswith(f"{SETTLED}_{month}_") for n in made), made
        assert reservations == {
            rid: (r, f"{RESERVATION}_{where[rid]}") for rid, (r, _, _) in rows.items()
        }
        assert markers == {rid: (m, f"{SETTLED}_{where[rid]}") for rid, (_, _, m) in rows.items()}
        links = dict(db.execute("SELECT id, reservation_id FROM billing_ledgerentry").fetchall())
        assert links == {entry: reservation for reservation, entry, _ in rows.values()}
        # Ids go on; the marker's unique key still refuses a second charge of a request.
        (new_id,) = db.execute(
            f"INSERT INTO {SETTLED} (request_id, group_id, bandwidth_micro, provider_cost_micro,"
            " source, created_at) VALUES (%s, 1, 0, 4, 'settle', now()) RETURNING id",
            [minted(datetime.now(UTC))],
        ).fetchone()
        assert new_id == max(m for _, _, m in rows.values()) + 1
        again = db.execute(
            f"INSERT INTO {SETTLED} (request_id, group_id, bandwidth_micro, provider_cost_micro,"
            " source, created_at) VALUES (%s, 1, 0, 4, 'reconcile', now())"
            " ON CONFLICT (request_id) DO NOTHING RETURNING id",
            [this_month],
        ).fetchall()
        assert again == []
        (sequence,) = db.execute("SELECT pg_get_serial_sequence(%s, 'id')", [SETTLED]).fetchone()
        assert sequence == f"public.{SETTLED}_id_seq"
        # The reservation's wallet is still a foreign key; the ledger's reservation is not.
        foreign = db.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
            " WHERE contype = 'f' AND (conrelid = %s::regclass OR confrelid = %s::regclass)",
            [RESERVATION, RESERVATION],
        ).fetchall()
        assert foreign == [(RESERVATION, "billing_wallet")]


SQLITE_SCRIPT = """
import json
from datetime import UTC, datetime, timedelta

import django

django.setup()
from django.core.management import call_command

call_command("migrate", verbosity=0)

import billing.partitions
from billing.models import Reservation, SettledRequest, SpendHold
from billing.partitions import apply_retention, ensure_months_ahead
from tests.support.tenants import make_tenant
from tests.billing.test_partitions import served

tenant = make_tenant(wallet_micro=1_000_000)
for request_id in ("old-1", "old-2", "old-3", "new"):
    served(tenant, request_id, cost=10)
served(tenant, "old-open", cost=0, settle=False)
now = datetime.now(UTC)
for model in (SpendHold, Reservation, SettledRequest):
    model.objects.exclude(request_id="new").update(created_at=now - timedelta(days=30))
billing.partitions.DELETE_BATCH = 2
report = apply_retention(now=now, days=10)
print(json.dumps({
    "partitions": ensure_months_ahead(),
    "deleted_rows": report.deleted_rows,
    "holds": sorted(SpendHold.objects.values_list("request_id", flat=True)),
    "reservations": sorted(Reservation.objects.values_list("request_id", flat=True)),
    "markers": sorted(SettledRequest.objects.values_list("request_id", flat=True)),
}))
"""


def test_retention_on_sqlite_deletes_closed_rows_in_batches(tmp_path):
    report = run_on_sqlite(SQLITE_SCRIPT, tmp_path)
    assert report["partitions"] == []
    # Three old settled requests: a hold, a reservation and a marker each; the open one stays.
    assert report["deleted_rows"] == 9
    assert report["holds"] == report["reservations"] == ["new", "old-open"]
    assert report["markers"] == ["new"]
