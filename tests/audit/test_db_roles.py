"""The application's database role cannot rewrite its own proof (core/db_roles.py).

The issue's attack, done as the role Tollgate serves with: erase a pool's fallback consent
and relabel its actor (UPDATE), switch the trail's triggers off first (ALTER TABLE ... DISABLE
TRIGGER), or empty it (TRUNCATE); cut receipts off the end, edit a ledger commit, move a
signed head. Each is refused by PostgreSQL; inserting and reading still work. Then a real
gateway and control plane run as that role: requests are served, charged and receipted,
control-plane changes audited and signed heads handed out. The deploy check warns for the
owner's role and is quiet for the application's.
"""

from __future__ import annotations

import io

import httpx
import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from audit.models import AuditEntry, SignedHead
from audit.services import signed_audit_head
from billing.models import LedgerEntry, Receipt
from core.db_roles import owner_problems
from tests.support.services import requires_postgres, requires_redis
from tests.support.stacks import own_stack
from tests.support.usage import settled

pytestmark = [requires_postgres, pytest.mark.timeout(120)]

ROLE = "tollgate_app_test"
PASSWORD = "app-role-password-for-the-test"


def app_url() -> str:
    db = connection.settings_dict
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{ROLE}:{PASSWORD}@{host}:{port}/{db['NAME']}"


def as_app() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        dbname=db["NAME"],
        user=ROLE,
        password=PASSWORD,
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        autocommit=True,
    )


@pytest.fixture
def app_role(transactional_db, settings):
    settings.APP_DATABASE = {"USER": ROLE, "PASSWORD": PASSWORD}
    out = io.StringIO()
    call_command("grant_app_role", stdout=out)
    assert out.getvalue().startswith(f"created role {ROLE}") or "updated role" in out.getvalue()
    return ROLE


def refusal(conn: psycopg.Connection, statement: str, *params) -> str:
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        conn.execute(statement, params)
    return str(refused.value)


def test_the_apps_role_may_only_insert_and_read_the_proof(app_role, stack):
    tenant = stack.tenant(wallet_micro=5_000_000)
    stack.openai(tenant).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "proof"}]
    )
    settled(tenant, 1)
    entry = AuditEntry.objects.filter(account_id=tenant.account_id).order_by("seq").last()
    receipt = Receipt.objects.get(account_id=tenant.account_id)
    commit = LedgerEntry.objects.filter(kind="commit").order_by("id").last()
    head = signed_audit_head(tenant.account_id)

    with as_app() as app:
        for statement, params in [
            # Erase the consent and relabel the actor of the trail's last entry.
            ("UPDATE audit_auditentry SET consent = '', actor_label = 'nobody' WHERE id = %s",
             (entry.pk,)),
            ("DELETE FROM audit_auditentry WHERE account_id = %s", (tenant.account_id,)),
            ("TRUNCATE audit_auditentry", ()),
            ("UPDATE billing_receipt SET cost_micro = cost_micro - 5000 WHERE id = %s",
             (receipt.pk,)),
            ("DELETE FROM billing_receipt WHERE account_id = %s", (tenant.account_id,)),
            ("TRUNCATE billing_receipt", ()),
            ("UPDATE billing_ledgerentry SET amount_micro = amount_micro - 5000 WHERE id = %s",
             (commit.pk,)),
            ("DELETE FROM billing_ledgerentry WHERE id = %s", (commit.pk,)),
            ("TRUNCATE billing_ledgerentry", ()),
            ("UPDATE audit_signedhead SET seq = 0 WHERE id = %s", (head.pk,)),
            ("DELETE FROM audit_signedhead WHERE id = %s", (head.pk,)),
        ]:  # fmt: skip
            assert "permission denied" in refusal(app, statement, *params), statement
        for statement in [
            "ALTER TABLE audit_auditentry DISABLE TRIGGER ALL",
            "DROP TRIGGER audit_append_only ON audit_auditentry",
            "ALTER TABLE billing_receipt OWNER TO CURRENT_USER",
            "DROP TABLE billing_ledgerentry",
        ]:
            assert "must be owner" in refusal(app, statement), statement
        # No trigger of its own on a proof table (it could rewrite rows as they go in), and
        # no way around the triggers for the session.
        assert "permission denied" in refusal(
            app,
            "CREATE TRIGGER rewrite BEFORE INSERT ON billing_receipt"
            " FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()",
        )
        assert "permission denied" in refusal(app, "SET session_replication_role = replica")

        # What it must do, it does: read and append.
        seq = app.execute(
            "SELECT max(seq) FROM audit_auditentry WHERE account_id = %s", (tenant.account_id,)
        ).fetchone()[0]
        assert seq == entry.seq
        app.execute(
            "INSERT INTO audit_signedhead (chain, account_id, seq, hash, signed_at, key_id,"
            " signature) VALUES ('audit', %s, 0, '', now(), 'r1', '')",
            (tenant.account_id,),
        )
        # And it owns the rest: a partition's parent, a wallet.
        assert app.execute(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'billing_wallet'"
        ).fetchone() == (ROLE,)
        assert owner_problems(app.cursor()) == []

    assert AuditEntry.objects.get(pk=entry.pk).consent == entry.consent
    assert Receipt.objects.get(pk=receipt.pk).cost_micro == receipt.cost_micro
    assert LedgerEntry.objects.get(pk=commit.pk).amount_micro == commit.amount_micro
    # The owner (the test's superuser) is what the deploy check warns about.
    with connection.cursor() as cursor:
        assert owner_problems(cursor) == [
            f"{table} is owned by {connection.settings_dict['USER'] or 'postgres'}, whose rights"
            " this role has"
            for table in sorted(
                (
                    "audit_auditentry",
                    "audit_signedhead",
                    "billing_ledgerentry",
                    "billing_receipt",
                    "billing_receiptarchive",
                )
            )
        ]


@requires_redis
def test_a_gateway_running_as_the_apps_role_serves_charges_receipts_and_audits(
    app_role, spawn_gateway, stub
):
    gateway = spawn_gateway(DATABASE_URL=app_url())
    stack = own_stack(gateway, stub)
    tenant = stack.tenant(wallet_micro=5_000_000)
    client = stack.openai(tenant)
    for n in range(3):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"as the app {n}"}]
        )
    stream = client.chat.completions.create(
        model="gpt-4o-mini", stream=True, messages=[{"role": "user", "content": "streamed"}]
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    settled(tenant, 4)
    receipts = Receipt.objects.filter(account_id=tenant.account_id).order_by("seq")
    assert [r.seq for r in receipts] == [1, 2, 3, 4]
    commits = LedgerEntry.objects.filter(wallet__account_id=tenant.account_id, kind="commit")
    assert commits.count() == 4

    auth = {"Authorization": f"Token {tenant.api_token}"}
    made = httpx.post(
        f"{gateway.url}/api/keys",
        headers=auth,
        json={"group": tenant.group_id, "name": "made by the app's role"},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    entry = AuditEntry.objects.filter(account_id=tenant.account_id).order_by("seq").last()
    assert entry.action == "key.create"
    head = httpx.get(f"{gateway.url}/api/audit/head", headers=auth, timeout=30).json()
    assert (head["chain"], head["seq"], head["hash"]) == ("audit", entry.seq, entry.hash)
    receipts_head = httpx.get(f"{gateway.url}/api/receipts/head", headers=auth, timeout=30)
    assert receipts_head.json()["seq"] == 4
    assert SignedHead.objects.filter(account_id=tenant.account_id).count() == 2
    assert settings.DATABASES["default"]["USER"] != ROLE  # the test itself is the owner
