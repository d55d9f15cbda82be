"""Retention finds the receipts due without a pass over the receipts table
(billing/archives.py `apply_receipt_retention`), and archives the same months on SQLite,
where the embedded run removes archived receipts itself (no database function there).

On PostgreSQL: three tenants, one with two months past the cutoff, one whose only receipts
are too recent, one with none. Every statement retention runs that reads receipts names one
account (the (account, seq) index), none is a DISTINCT, and the months archived and receipts
removed are the ones the rule says. Run again, it archives nothing and removes nothing.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.archives import apply_receipt_retention
from billing.models import Receipt, ReceiptArchive
from tests.billing.test_receipt_archives import month_start, settle
from tests.support.databases import run_on_sqlite
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

RECEIPTS_TABLE = Receipt._meta.db_table


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_retention_probes_each_account_by_its_index_and_archives_what_is_due(settings, tmp_path):
    now = timezone.now()
    settings.TOLLGATE = {
        **settings.TOLLGATE,
        "ARCHIVE_DIR": tmp_path / "archives",
        "RECEIPT_RETENTION_DAYS": now.day + 1,  # the cutoff falls in last month
    }
    first, second, third = (month_start(now, back) for back in (3, 2, 1))
    old = make_tenant(wallet_micro=10_000_000)
    recent = make_tenant(wallet_micro=10_000_000)
    idle = make_tenant(wallet_micro=10_000_000)
    settle(
        old.account_id,
        [
            (first + timedelta(days=2), [11, 12]),
            (second + timedelta(days=2), [21]),
            (third + timedelta(days=2), [31]),
        ],
        1,
    )
    settle(recent.account_id, [(third + timedelta(days=3), [41, 42])], 100)

    with CaptureQueriesContext(connection) as queries:
        report = apply_receipt_retention(now=now)

    assert report.archived == [
        (old.account_id, f"{first:%Y-%m}"),
        (old.account_id, f"{second:%Y-%m}"),
    ]
    assert report.removed == 3  # the first two months', the third month's receipt kept
    assert list(
        Receipt.objects.filter(account_id=old.account_id).values_list("seq", flat=True)
    ) == [4]
    assert Receipt.objects.filter(account_id=recent.account_id).count() == 2
    assert not ReceiptArchive.objects.filter(account_id__in=[recent.account_id, idle.account_id])
    reads = [q["sql"] for q in queries if f'FROM "{RECEIPTS_TABLE}"' in q["sql"]]
    assert reads, "retention read no receipts"
    for sql in reads:
        assert "DISTINCT" not in sql.upper(), sql
        assert f'"{RECEIPTS_TABLE}"."account_id" = ' in sql, sql
    # The tenant without receipts costs two probes: its last archive, its first receipt.
    idle_probes = rf'"account_id" = {idle.account_id}\b'
    assert sum(bool(re.search(idle_probes, q["sql"])) for q in queries) == 2

    again = apply_receipt_retention(now=now)

    assert (again.archived, again.removed) == ([], 0)
    assert Receipt.objects.filter(account_id=old.account_id).count() == 1


SQLITE_SCRIPT = """
import json
import os
from datetime import UTC, datetime, timedelta

os.environ["TOLLGATE_ARCHIVE_DIR"] = ARCHIVE_DIR
os.environ["TOLLGATE_RECEIPT_RETENTION_DAYS"] = "40"

import django

django.setup()
from django.core.management import call_command

call_command("migrate", verbosity=0)
from billing import archives
from billing.models import Receipt, ReceiptArchive
from billing.receipts import Draft, append
from billing.services import tenant_provision
from core.sqlexec import run_sync

account = tenant_provision(name="sqlite-tenant", wallet_micro=1_000_000).account
other = tenant_provision(name="sqlite-idle", wallet_micro=1_000_000).account


def drafts(n, costs):
    return [
        Draft(account_id=account.pk, request_id=f"req-{n + i}", kind="charge", group_id=None,
              api_key_id=None, cost_micro=cost, bandwidth_micro=0, detail={})
        for i, cost in enumerate(costs)
    ]


now = datetime(2026, 6, 20, tzinfo=UTC)  # cutoff 2026-05-11: April is due, May is not
run_sync(append(drafts(1, [101, 102]), now=datetime(2026, 3, 10, tzinfo=UTC)))
run_sync(append(drafts(3, [201]), now=datetime(2026, 4, 10, tzinfo=UTC)))
run_sync(append(drafts(4, [301, 302]), now=datetime(2026, 5, 2, tzinfo=UTC)))
report = archives.apply_receipt_retention(now=now)
kept = list(Receipt.objects.filter(account_id=account.pk).values_list("seq", flat=True))
manifests = list(
    ReceiptArchive.objects.order_by("first_seq").values_list("period", "first_seq", "last_seq")
)
files = sorted(
    str(p.relative_to(ARCHIVE_DIR)) for p in archives.archive_root().rglob("*") if p.is_file()
)
try:
    archives.drop_archived(account.pk, through_seq=5)
    refused = ""
except ValueError as exc:
    refused = str(exc)
# A month whose receipts are all archived but its last: the head is never removed.
run_sync(append(drafts(6, [401]), now=datetime(2026, 7, 1, tzinfo=UTC)))
later = archives.apply_receipt_retention(now=datetime(2026, 8, 1, tzinfo=UTC))
print(json.dumps({
    "archived": report.archived,
    "removed": report.removed,
    "kept": kept,
    "manifests": manifests,
    "files": files,
    "refused": refused,
    "later": [later.archived, later.removed],
    "kept_later": list(Receipt.objects.filter(account_id=account.pk).values_list(
        "seq", flat=True)),
    "other": Receipt.objects.filter(account_id=other.pk).count(),
}))
"""


def test_retention_on_sqlite_removes_archived_receipts_itself_but_the_head(tmp_path):
    store = tmp_path / "archives"
    report = run_on_sqlite(f"ARCHIVE_DIR = {json.dumps(str(store))}\n{SQLITE_SCRIPT}", tmp_path)

    account = report["archived"][0][0]
    assert report["archived"] == [[account, "2026-03"], [account, "2026-04"]]
    assert report["removed"] == 3
    assert report["kept"] == [4, 5]
    assert report["manifests"] == [["2026-03", 1, 2], ["2026-04", 3, 3]]
    assert report["files"] == [f"{account}/2026-03.jsonl.gz", f"{account}/2026-04.jsonl.gz"]
    assert report["refused"] == f"receipts of account {account} through 5 not archived"
    # A month later May is due: archived, and its receipts removed but the last (the head,
    # July's receipt, is of a month not due).
    assert report["later"] == [[[account, "2026-05"]], 2]
    assert report["kept_later"] == [6]
    assert report["other"] == 0
