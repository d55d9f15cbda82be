"""With retention, receipts leave PostgreSQL as signed monthly archives (billing/archives.py).

A tenant with receipts in three months (each naming the wallet ledger entry that paid it) and
a second whose only month is archived; retention cuts the first two months. Run as the
application's own database role (which may not DELETE receipts): the archives are written
and their receipts removed through the owner's SECURITY DEFINER function, all but each
account's last receipt; the role still cannot DELETE directly, nor make the function remove
what no archive covers. Statements of archived months are unchanged (same totals, signed),
the store and the ledger still verify, the archives downloaded from a real process verify
offline and chain into the store, a tampered archive (a byte of a body, a dropped line, a
swapped file) fails, and the next receipt chains on.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import subprocess
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import psycopg
import pytest
from django.db import connection

from accounts.models import Account
from billing import statements
from billing.archives import archive_path, manifest
from billing.models import Receipt, ReceiptArchive, Wallet
from billing.receipt_keys import receipt_keys
from billing.receipts import Draft, append, verify_statement
from billing.services import wallet_credit
from billing.tasks import archive_receipts
from core.sqlexec import run_sync
from tests.audit.test_db_roles import PASSWORD, ROLE, app_role, as_app  # noqa: F401
from tests.billing.test_receipt_storage import real_draft
from tests.billing.test_verify_receipts import verify
from tests.support.processes import run_manage
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

pytestmark = [requires_postgres, pytest.mark.timeout(180)]

# The commands docs/tenant-api.md shows, run here as written.
LIST_ARCHIVES = (
    'curl -fsS -H "Authorization: Token $TOLLGATE_TOKEN" "$TOLLGATE_URL/api/receipts/archives"'
    " -o archives.json"
)
GET_ARCHIVE = (
    'curl -fsS -H "Authorization: Token $TOLLGATE_TOKEN"'
    ' "$TOLLGATE_URL/api/receipts/archives/$PERIOD" -o "$PERIOD.jsonl.gz"'
)
VERIFY_ARCHIVES = (
    "python manage.py verify_receipts --archive 2026-09.jsonl.gz --archive 2026-10.jsonl.gz"
    ' --public-key "$KEY"'
)
VERIFY_ARCHIVES_AND_EXPORT = (
    "python manage.py verify_receipts --archive 2026-09.jsonl.gz --archive 2026-10.jsonl.gz"
    ' --file receipts.jsonl --public-key "$KEY"'
)


def month_start(moment: datetime, back: int) -> datetime:
    """The first instant of the month `back` months before `moment`'s, UTC."""
    year, month = moment.year, moment.month - back
    while month < 1:
        year, month = year - 1, month + 12
    return datetime(year, month, 1, tzinfo=UTC)


def charge(account_id: int, n: int, cost: int) -> Draft:
    """A receipt draft naming the wallet ledger entry that took its cost (written now)."""
    wallet = Wallet.objects.get(account_id=account_id)
    entry = wallet_credit(wallet=wallet, amount_micro=-cost, kind="commit")
    return dataclasses.replace(
        real_draft(account_id, n, cost=cost), wallet_entries=(entry.pk,), wallet_taken_micro=cost
    )


def settle(account_id: int, batches: list[tuple[datetime, list[int]]], first_n: int) -> int:
    """Append each batch of receipts at its moment; return the next request number."""
    n = first_n
    for moment, costs in batches:
        drafts = []
        for cost in costs:
            drafts.append(charge(account_id, n, cost))
            n += 1
        run_sync(append(drafts, now=moment))
    return n


@contextmanager
def as_the_apps_role():
    """Run this process's Django connection as the application's role, not the owner."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(USER=ROLE, PASSWORD=PASSWORD)
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(USER=saved["USER"], PASSWORD=saved["PASSWORD"])


def stable(statement: dict) -> dict:
    """A statement less what changes with when it is issued."""
    return {
        k: v
        for k, v in statement.items()
        if k not in ("issued_at", "signed_heads", "hash", "signature")
    }


@pytest.mark.usefixtures("app_role")
def test_retention_archives_whole_months_and_the_chain_continues_across_them(
    settings, tmp_path, spawn_gateway
):
    store = tmp_path / "archives"
    now = datetime.now(UTC)
    # The cutoff falls in last month: the two months before it are cut, last month is not.
    settings.TOLLGATE = {
        **settings.TOLLGATE,
        "ARCHIVE_DIR": store,
        "RECEIPT_RETENTION_DAYS": now.day + 1,
    }
    first, second, third = (month_start(now, back) for back in (3, 2, 1))
    periods = [f"{m:%Y-%m}" for m in (first, second, third)]

    tenant = make_tenant(wallet_micro=10_000_000)
    lone = make_tenant(wallet_micro=10_000_000)
    for account_id in (tenant.account_id, lone.account_id):
        Account.objects.filter(pk=account_id).update(time_zone="UTC")
    n = settle(
        tenant.account_id,
        [
            (first + timedelta(days=3), [101, 102]),
            (first + timedelta(days=20), [103]),
            (second + timedelta(days=9), [201, 202]),
            (third + timedelta(days=1), [301]),
            (third + timedelta(days=5), [302]),
        ],
        1,
    )
    settle(lone.account_id, [(first + timedelta(days=4), [501, 502])], 1_000)
    account = Account.objects.get(pk=tenant.account_id)
    issued = datetime.now(UTC)
    before = {p: statements.statement(account=account, period=p, now=issued) for p in periods}
    assert [before[p]["receipts"] for p in periods] == [3, 2, 2]
    assert [before[p]["totals"]["wallet_taken_micro"] for p in periods] == [306, 403, 603]
    ok, lines = verify()
    assert ok, lines

    with as_the_apps_role():
        assert connection.cursor().execute("SELECT current_user").fetchone() == (ROLE,)
        report = archive_receipts()
    assert sorted(report["archived"]) == sorted(
        [f"{tenant.account_id}/{periods[0]}", f"{tenant.account_id}/{periods[1]}",
         f"{lone.account_id}/{periods[0]}"]
    )  # fmt: skip
    # Every receipt of the cut months is gone, but the lone tenant's last (its chain's head).
    assert report["removed"] == 5 + 1
    stored = Receipt.objects.filter(account_id=tenant.account_id).order_by("seq")
    assert [r.seq for r in stored] == [6, 7]
    assert list(
        Receipt.objects.filter(account_id=lone.account_id).values_list("seq", flat=True)
    ) == [2]

    archived = list(
        ReceiptArchive.objects.filter(account_id=tenant.account_id).order_by("first_seq")
    )
    assert [(a.period, a.first_seq, a.last_seq, a.receipts) for a in archived] == [
        (periods[0], 1, 3, 3),
        (periods[1], 4, 5, 2),
    ]
    assert archived[0].prev == "0" * 64 and archived[1].prev == archived[0].last_hash
    assert json.loads(stored[0].body)["prev"] == archived[1].last_hash
    for archive in archived:
        data = archive_path(tenant.account_id, archive.period).read_bytes()
        assert len(data) == archive.size_bytes
        lines_in = gzip.decompress(data).decode().splitlines()
        assert len(lines_in) == archive.receipts
        assert set(json.loads(lines_in[0])) == {
            "account_id", "seq", "kind", "request_id", "settled_at", "body", "prev_hash", "hash",
            "signature", "key_id",
        }  # fmt: skip
        assert verify_statement(manifest(archive), receipt_keys().public()) == []

    # The application's role still may not DELETE a receipt, nor have the function remove
    # what no archive covers; it never removes an account's last receipt.
    with as_app() as app:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            app.execute("DELETE FROM billing_receipt WHERE account_id = %s", (tenant.account_id,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="not archived"):
            app.execute("SELECT tollgate_drop_archived_receipts(%s, 7)", (tenant.account_id,))
        assert app.execute(
            "SELECT tollgate_drop_archived_receipts(%s, 2)", (lone.account_id,)
        ).fetchone() == (0,)
        assert not app.execute(
            "SELECT has_function_privilege('public', 'tollgate_drop_archived_receipts(bigint,"
            " bigint)', 'EXECUTE')"
        ).fetchone()[0]
    assert Receipt.objects.filter(account_id=tenant.account_id).count() == 2

    # Statements of archived months are unchanged, and signed; so is the month after them.
    after = {p: statements.statement(account=account, period=p, now=issued) for p in periods}
    for period in periods:
        assert stable(after[period]) == stable(before[period]), period
        assert verify_statement(after[period], receipt_keys().public()) == []
    assert [after[p]["totals"]["provider_cost_micro"] for p in periods] == [306, 403, 603]
    # Pages start after the archived seqs; the store and its ledger still verify.
    assert [r.seq for r in statements.chain_page(account_id=tenant.account_id)] == [6, 7]
    ok, lines = verify()
    assert ok, lines
    assert f"account {tenant.account_id}: 2 receipts, chain intact, head 7 signed by r1" in lines

    # Downloaded from a real process, the archives verify offline and chain into the export.
    gateway = spawn_gateway(TOLLGATE_ARCHIVE_DIR=str(store))
    shell = {
        **os.environ,
        "TOLLGATE_TOKEN": tenant.api_token,
        "TOLLGATE_URL": gateway.url,
    }
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    for command, period in [
        (LIST_ARCHIVES, ""),
        (GET_ARCHIVE, periods[0]),
        (GET_ARCHIVE, periods[1]),
    ]:
        ran = subprocess.run(
            ["bash", "-c", command], cwd=downloads, env={**shell, "PERIOD": period},
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    listing = json.loads((downloads / "archives.json").read_text())
    assert [m["period"] for m in listing["results"]] == periods[:2]
    assert listing["results"] == [manifest(a) for a in archived]
    assert (downloads / f"{periods[0]}.jsonl.gz").read_bytes() == archive_path(
        tenant.account_id, periods[0]
    ).read_bytes()
    export = downloads / "receipts.jsonl"
    page = httpx.get(
        f"{gateway.url}/api/receipts",
        headers={"Authorization": f"Token {tenant.api_token}"},
    ).json()
    export.write_text("".join(json.dumps(r) + "\n" for r in page["results"]))
    assert [r["seq"] for r in page["results"]] == [6, 7]
    assert (
        httpx.get(
            f"{gateway.url}/api/receipts/archives/{periods[2]}",
            headers={"Authorization": f"Token {tenant.api_token}"},
        ).status_code
        == 404
    )
    assert (
        httpx.get(
            f"{gateway.url}/api/receipts/archives/{periods[0]}",
            headers={"Authorization": f"Token {lone.api_token}"},
        ).status_code
        == 200
    )  # the lone tenant's own month, not the other's
    key = receipt_keys().public()["r1"]

    def offline(command: str) -> subprocess.CompletedProcess:
        """Run a documented command on this test's months (the docs name two of 2026's)."""
        months = {"2026-09": periods[0], "2026-10": periods[1]}
        command = re.sub(r"(2026-09|2026-10)(?=\.jsonl\.gz)", lambda m: months[m[1]], command)
        return run_manage(command.replace('"$KEY"', key), cwd=downloads)

    ran = offline(VERIFY_ARCHIVES)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (
        f"account {tenant.account_id}: 5 receipts, chain intact, head 5 signed by r1" in ran.stdout
    )
    ran = offline(VERIFY_ARCHIVES_AND_EXPORT)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"account {tenant.account_id}: 7 receipts, chain intact" in ran.stdout

    # Tampered: one byte of a body, a dropped line, a swapped file; each fails.
    original = (downloads / f"{periods[1]}.jsonl.gz").read_bytes()
    records = gzip.decompress(original).decode().splitlines(keepends=True)
    changed = records[0].replace(
        '\\"provider_cost_micro\\":201', '\\"provider_cost_micro\\":209', 1
    )
    assert changed != records[0]
    for tampered, says in [
        ([changed, *records[1:]], "its SHA-256 is in no manifest"),
        (records[1:], "its SHA-256 is in no manifest"),
    ]:
        (downloads / f"{periods[1]}.jsonl.gz").write_bytes(
            gzip.compress("".join(tampered).encode(), mtime=0)
        )
        ran = offline(VERIFY_ARCHIVES)
        assert ran.returncode == 1 and says in ran.stdout, ran.stdout + ran.stderr
    # Even with its manifest edited to match, a changed body breaks the chain and signature.
    (downloads / f"{periods[1]}.jsonl.gz").write_bytes(
        gzip.compress("".join([changed, *records[1:]]).encode(), mtime=0)
    )
    forged = json.loads((downloads / "archives.json").read_text())
    data = (downloads / f"{periods[1]}.jsonl.gz").read_bytes()
    forged["results"][1].update(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
    (downloads / "archives.json").write_text(json.dumps(forged))
    ran = offline(VERIFY_ARCHIVES)
    assert ran.returncode == 1, ran.stdout
    assert f"the archive {periods[1]}'s manifest: it does not match its hash (changed)" in (
        ran.stdout
    )
    assert "its body does not match its hash (changed)" in ran.stdout
    (downloads / "archives.json").write_text(json.dumps(listing))
    # Swapped: the first month's file downloaded in the second's place.
    (downloads / f"{periods[1]}.jsonl.gz").write_bytes(
        (downloads / f"{periods[0]}.jsonl.gz").read_bytes()
    )
    ran = offline(VERIFY_ARCHIVES)
    assert ran.returncode == 1 and "given twice" in ran.stderr, ran.stdout + ran.stderr
    # And the second month alone, against the export: the first is missing before it.
    (downloads / f"{periods[1]}.jsonl.gz").write_bytes(original)
    ran = offline(VERIFY_ARCHIVES_AND_EXPORT.replace("--archive 2026-09.jsonl.gz ", ""))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    export.write_text("".join(json.dumps(r) + "\n" for r in page["results"][1:]))
    ran = offline(VERIFY_ARCHIVES_AND_EXPORT)
    assert ran.returncode == 1 and "does not continue the archive" in ran.stdout, ran.stdout

    # A file changed in the store behind the manifest's back is what the store check names.
    path = archive_path(tenant.account_id, periods[0])
    kept = path.read_bytes()
    path.write_bytes(
        gzip.compress(b"".join(gzip.decompress(kept).splitlines(keepends=True)[1:]), mtime=0)
    )
    ok, lines = verify()
    assert not ok and any(
        f"the archive {periods[0]}'s SHA-256 is not its manifest's" in line for line in lines
    ), lines
    path.write_bytes(kept)

    # The next receipt chains on from the store's head, and the store still verifies.
    settle(tenant.account_id, [(datetime.now(UTC), [401])], n)
    newest = Receipt.objects.get(account_id=tenant.account_id, seq=8)
    assert json.loads(newest.body)["prev"] == stored.get(seq=7).hash
    assert orjson.loads(newest.body)["running"]["wallet_taken_micro"] == 306 + 403 + 603 + 401
    ok, lines = verify()
    assert ok, lines
