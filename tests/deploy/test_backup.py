"""The backup and restore of docs/production.md, run as written: a custom-format pg_dump of
the live database, restored into an empty one, holds the ledger exactly."""

from __future__ import annotations

import subprocess
import uuid

import psycopg
import pytest

from billing.models import LedgerEntry, Wallet
from tests.support.processes import child_database_url
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

pytestmark = requires_postgres

# Verbatim from docs/production.md, "Backups of PostgreSQL".
BACKUP = 'pg_dump --format=custom --file=tollgate.dump "$DATABASE_URL"'
RESTORE = 'pg_restore --no-owner --dbname="$RESTORE_URL" tollgate.dump'


@pytest.fixture
def empty_database():
    source = child_database_url()
    name = f"tollgate_restore_{uuid.uuid4().hex[:8]}"
    admin = source.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield source.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_dump_restores_the_ledger_exactly(transactional_db, tmp_path, empty_database):
    tenant = make_tenant(wallet_micro=7_654_321)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    entries = list(
        LedgerEntry.objects.filter(wallet=wallet).order_by("id").values_list("kind", "amount_micro")
    )
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": child_database_url()}
    env["RESTORE_URL"] = empty_database
    for command in (BACKUP, RESTORE):
        result = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr

    with psycopg.connect(empty_database) as conn:
        balance = conn.execute(
            "SELECT balance_micro, reserved_micro FROM billing_wallet WHERE account_id = %s",
            (tenant.account_id,),
        ).fetchone()
        restored = conn.execute(
            "SELECT kind, amount_micro FROM billing_ledgerentry WHERE wallet_id = %s ORDER BY id",
            (wallet.pk,),
        ).fetchall()
    assert balance == (7_654_321, 0)
    assert restored == entries and entries
