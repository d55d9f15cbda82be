"""bench/scale.py at a tiny size: it loads exactly what it generated (receipts included, in
chains verify_receipts accepts) and every call answers."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.conf import settings

from tests.support.bench_runs import bench_report
from tests.support.services import requires_postgres, requires_redis

ROOT = Path(__file__).resolve().parents[2]
ROWS = 3000
BENCH_REDIS_DB = 6  # its own Redis database: the bench clears its tollgate:* keys

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(900)]


def server_url() -> str:
    """The test database's server (the bench creates and drops its own databases there)."""
    return urlunsplit(urlsplit(os.environ["DATABASE_URL"])._replace(path="/postgres"))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("scale") / "scale.json"
    redis = urlsplit(settings.REDIS_URL)._replace(path=f"/{BENCH_REDIS_DB}")
    args = [
        "--scale", "--scale-rows", str(ROWS), "--scale-requests", "100",
        "--database-url", server_url(), "--redis-url", urlunsplit(redis),
        "--scale-verify-receipts",
    ]  # fmt: skip
    return bench_report(args, out, timeout_s=840)


def test_it_loads_exactly_the_rows_it_generated(report):
    load = report["load"]
    assert load["counted"]["usage_usagelog"] == ROWS
    assert load["written"]["usage_usagelog"] == ROWS
    assert load["counted"] == load["written"]
    assert load["written"]["billing_settledrequest"] == ROWS


def test_the_books_come_in_the_documented_proportions(report):
    written = report["load"]["written"]
    assert 1.0 < report["load"]["attempts"] / ROWS < 1.07
    assert 0.6 < written["billing_reservation"] / ROWS < 0.9
    assert written["billing_ledgerentry"] == written["billing_reservation"]
    assert 0.7 < written["billing_spendhold"] / ROWS < 0.9


def test_attempts_are_packed_in_their_rows(report):
    load = report["load"]
    if not load["trails_loaded"]:
        pytest.skip("this code keeps attempts in a table of their own")
    assert "usage_usageattempt" not in load["written"]
    # Per trail on disk, its header included (a row without attempts would take 1 byte).
    assert 5 < load["bytes_per_trail"] <= 50


def test_every_settled_request_has_its_receipt(report):
    load = report["load"]
    assert load["receipts_loaded"]
    assert load["counted"]["billing_receipt"] == load["written"]["billing_settledrequest"]
    assert load["written"]["billing_receipt"] == ROWS
    assert 0 < load["bytes_per_receipt"] < load["bytes_per_usage_row"]
    assert load["bytes_per_usage_row_without_receipts"] < load["bytes_per_usage_row"]


def test_the_loaded_chain_passes_verify_receipts(report):
    # The big tenant's chain as the generator wrote it: hashes, seq and prev, signatures,
    # running totals, the columns against the bodies and the ledger entries each names.
    load = report["load"]
    assert load["receipts_verified"] is True, load["receipts_verify_output"]
    assert "1 chain(s) intact." in load["receipts_verify_output"]


def test_the_rebuilt_rollups_count_every_row(report):
    if not (ROOT / "usage/management/commands/rebuild_usage_rollups.py").is_file():
        pytest.skip("this code has no rollups")
    assert report["load"]["rollup_requests"] == ROWS


def test_every_timed_call_answered_200(report):
    calls = report["calls"]
    # Per tenant: 7 usage API calls, 5 pages, and for each of 3 months the receipts' API page,
    # statement and dashboard page, then the wallet ledger's API and page; 4 admin lists.
    assert len(calls) == 2 * (12 + 3 * 3 + 2) + 4
    bad = [(c["tenant"], c["name"], c["statuses"]) for c in calls if set(c["statuses"]) != {200}]
    assert not bad, report["output"]
    assert report["export"]["status"] == 200
    assert report["export"]["rows"] > 0


def test_each_months_receipts_export_holds_its_receipts(report):
    exports = report["receipt_exports"]
    assert [(e["tenant"], e["name"].rsplit("=", 1)[1]) for e in exports] == [
        (who, month) for who in ("big", "small") for month in ("oldest", "middle", "current")
    ]
    assert all(set(e["statuses"]) == {200} for e in exports), report["output"]
    big = [e["lines"] for e in exports if e["tenant"] == "big"]
    # The three months are distinct slices of the big tenant's 60% of the rows.
    assert all(lines > 0 for lines in big)
    assert sum(big) <= report["load"]["written"]["billing_receipt"]


def test_the_hot_path_served_every_request(report):
    assert [h["database"] for h in report["hot_path"]] == ["empty", "loaded"]
    for run in report["hot_path"]:
        assert (run["ok"], run["failed"]) == (100, 0), run["failure_kinds"]
    assert report["exit_code"] == 0, report["output"]


def test_it_drops_its_databases(report):
    with psycopg.connect(server_url(), autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (report["databases"],)
        ).fetchall()
    assert len(report["databases"]) == 2
    assert left == []
