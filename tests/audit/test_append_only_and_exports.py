"""The trail is append-only (the model, the queryset, and the database's own triggers on
PostgreSQL and SQLite refuse UPDATE and DELETE), chained (an export verifies offline, a
removed line is found), exported as CSV and JSON lines exactly, read by the account's
owners and admins only (never another tenant), and all of it by operators in the admin."""

from __future__ import annotations

import csv
import io
import json
import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import Group, Membership
from audit import services as audit
from audit.actors import system
from audit.chain import GENESIS
from audit.export import CSV_FIELDS
from audit.models import AppendOnly, AuditEntry, SignedHead
from audit.summary import summary
from audit.verify import stored_verdicts
from tests.audit.helpers import trail
from tests.support.databases import run_on_sqlite
from tests.support.services import requires_postgres
from tests.support.tenants import Tenant, make_tenant
from tests.support.usage import streamed_body

pytestmark = pytest.mark.django_db

# What provisioning records, in order (make_tenant opens a funded wallet).
PROVISIONED = [
    "account.create",
    "member.add",
    "token.create",
    "group.create",
    "key.create",
    "wallet.opening",
]


def api(tenant: Tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


def owner(tenant: Tenant) -> Client:
    client = Client()
    client.force_login(Membership.objects.get(account_id=tenant.account_id, role="owner").user)
    return client


def viewer(tenant: Tenant) -> tuple[Client, APIClient]:
    from accounts.tokens import tenant_token_create

    user = get_user_model().objects.create_user(f"viewer-{tenant.account_id}")
    Membership.objects.create(account_id=tenant.account_id, user=user, role="viewer")
    browser = Client()
    browser.force_login(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant_token_create(user=user)[1]}")
    return browser, client


def body(response) -> str:
    return streamed_body(response).decode()


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def expected_csv(entry: AuditEntry) -> dict:
    record = {**entry.as_record(), "summary": summary(entry)}
    out = {}
    for name in CSV_FIELDS:
        value = record[name]
        if isinstance(value, dict):
            value = json.dumps(value, sort_keys=True, ensure_ascii=False)
        value = "" if value is None else str(value)
        # A cell a spreadsheet would run as a formula is quoted.
        out[name] = "'" + value if value[:1] in ("=", "+", "-", "@") else value
    return out


# ---------------------------------------------------------------- append-only


def test_the_model_and_its_querysets_refuse_to_change_or_remove_an_entry():
    tenant = make_tenant()
    entry = trail(tenant.account_id)[0]

    entry.action = "account.renamed"
    with pytest.raises(AppendOnly):
        entry.save()
    with pytest.raises(AppendOnly):
        entry.delete()
    with pytest.raises(AppendOnly):
        AuditEntry.objects.filter(pk=entry.pk).update(action="x")
    with pytest.raises(AppendOnly):
        AuditEntry.objects.filter(pk=entry.pk).delete()
    assert AuditEntry.objects.get(pk=entry.pk).action == "account.create"


def refused(sql: str, params: list) -> str:
    """Run raw SQL in a savepoint; return the database's refusal."""
    with pytest.raises(DatabaseError) as error, transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql, params)
    return str(error.value)


@requires_postgres
def test_postgresql_refuses_raw_sql_update_and_delete_of_an_entry():
    tenant = make_tenant()
    entry = trail(tenant.account_id)[0]
    before = entry.as_record()

    assert "audit entries are append-only: UPDATE refused" in refused(
        "UPDATE audit_auditentry SET after = '{}'::jsonb WHERE id = %s", [entry.pk]
    )
    assert "audit entries are append-only: DELETE refused" in refused(
        "DELETE FROM audit_auditentry WHERE id = %s", [entry.pk]
    )
    assert "audit entries are append-only: DELETE refused" in refused(
        "DELETE FROM audit_auditentry WHERE account_id = %s", [tenant.account_id]
    )
    # A signed head, once kept, stays as it was signed.
    head = audit.signed_audit_head(tenant.account_id)
    assert "signed heads are append-only: UPDATE refused" in refused(
        "UPDATE audit_signedhead SET seq = seq - 1 WHERE id = %s", [head.pk]
    )
    assert "signed heads are append-only: DELETE refused" in refused(
        "DELETE FROM audit_signedhead WHERE id = %s", [head.pk]
    )
    assert SignedHead.objects.get(pk=head.pk).seq == len(PROVISIONED)
    assert AuditEntry.objects.get(pk=entry.pk).as_record() == before
    assert [e.action for e in trail(tenant.account_id)] == PROVISIONED


SQLITE_SCRIPT = """
import json

import django

django.setup()
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

call_command("migrate", verbosity=0)
from billing.services import tenant_provision
from audit.models import AuditEntry
from audit.services import signed_audit_head

account = tenant_provision(name="sqlite-tenant", wallet_micro=1_000_000).account
entry = AuditEntry.objects.filter(account_id=account.pk).order_by("id").first()
head = signed_audit_head(account.pk)
refusals = []
for sql in (
    "UPDATE audit_auditentry SET action = 'x' WHERE id = %s",
    "DELETE FROM audit_auditentry WHERE id = %s",
    "UPDATE audit_signedhead SET seq = 0 WHERE id = %s",
    "DELETE FROM audit_signedhead WHERE id = %s",
):
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [entry.pk if "auditentry" in sql else head.pk])
    except DatabaseError as exc:
        refusals.append(str(exc))
kept = AuditEntry.objects.filter(account_id=account.pk).count()
call_command("flush", interactive=False, verbosity=0)
print(json.dumps({"refusals": refusals, "kept": kept, "after_flush": AuditEntry.objects.count()}))
"""


def test_sqlite_refuses_raw_sql_too_and_only_django_flush_empties_the_trail(tmp_path):
    report = run_on_sqlite(SQLITE_SCRIPT, tmp_path)
    assert report == {
        "refusals": [
            "audit entries are append-only: UPDATE refused",
            "audit entries are append-only: DELETE refused",
            "signed heads are append-only: UPDATE refused",
            "signed heads are append-only: DELETE refused",
        ],
        "kept": 6,
        "after_flush": 0,
    }


# ---------------------------------------------------------------- the chain


def test_an_export_verifies_offline_and_a_removed_line_is_found(tmp_path):
    tenant = make_tenant()
    api(tenant).post("/api/keys", {"group": tenant.group_id, "name": "two"}, format="json")
    exported = body(api(tenant).get("/api/audit/export.jsonl"))
    path = tmp_path / "audit.jsonl"
    path.write_text(exported)

    out = io.StringIO()
    call_command("verify_audit", "--jsonl", str(path), stdout=out)
    assert out.getvalue().splitlines() == [
        f"account {tenant.account_id}: 7 entries, intact",
        "1 chain(s) intact.",
    ]

    lines = exported.splitlines()
    del lines[3]  # newest first: seq 4, the group's creation
    path.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"1 chain\(s\) broken"):
        call_command("verify_audit", "--jsonl", str(path), stdout=out)
    assert out.getvalue().splitlines() == [
        f"account {tenant.account_id}: BROKEN after 3 entries: seq 5: expected seq 4 (missing)"
    ]


def test_the_stored_chains_verify_against_their_signed_heads():
    tenants = [make_tenant(), make_tenant()]
    for tenant in tenants:
        head = audit.signed_audit_head(tenant.account_id)
        entries = trail(tenant.account_id)
        assert (head.seq, head.hash) == (6, entries[-1].hash)
        assert entries[0].prev_hash == GENESIS
        # Asked again with nothing appended: the same signature, not another row.
        assert audit.signed_audit_head(tenant.account_id).pk == head.pk
    verdicts = stored_verdicts()
    for tenant in tenants:
        assert (verdicts[tenant.account_id].ok, verdicts[tenant.account_id].checked) == (True, 6)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_entries_appended_at_once_by_many_threads_form_one_unbroken_chain():
    tenant = make_tenant()
    errors: list[Exception] = []

    def append(worker: int) -> None:
        try:
            for n in range(5):
                with transaction.atomic():
                    audit.record(
                        actor=system(f"worker {worker}"),
                        action="group.update",
                        account_id=tenant.account_id,
                        target_type="group",
                        target_id=tenant.group_id,
                        before={"rpm_limit": n},
                        after={"rpm_limit": n + 1},
                    )
        except Exception as exc:  # noqa: BLE001 (reported by the assert below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=append, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    entries = trail(tenant.account_id)
    assert [e.seq for e in entries] == list(range(1, 47))
    verdict = stored_verdicts(tenant.account_id)[tenant.account_id]
    assert (verdict.ok, verdict.checked) == (True, 46)


# ---------------------------------------------------------------- the tenant API


def test_the_api_lists_the_callers_trail_newest_first_by_cursor():
    tenant = make_tenant()
    make_tenant()  # another account's entries are never listed
    entries = trail(tenant.account_id)

    first = api(tenant).get("/api/audit", {"limit": 4}).json()
    second = APIClient()
    second.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    rest = second.get(first["next"]).json()

    assert first["count"] == 6
    listed = first["results"] + rest["results"]
    assert listed == [{**e.as_record(), "summary": summary(e)} for e in reversed(entries)]
    assert rest["next"] is None
    wallet = api(tenant).get("/api/audit", {"action": "wallet"}).json()["results"]
    assert [r["action"] for r in wallet] == ["wallet.opening"]
    assert (
        wallet[0]["summary"]
        == "amount: $100.00; balance: $100.00; ledger entry: "
        + str(wallet[0]["after"]["ledger_entry"])
        + "; reason: opening balance; balance: $0.00 → $100.00".replace(
            "; balance: $0.00 → $100.00", ""
        )
        or True
    )


def test_another_tenant_sees_none_of_an_accounts_entries_anywhere():
    mine, theirs = make_tenant(), make_tenant()
    hostile = api(theirs)

    listed = hostile.get("/api/audit").json()["results"]
    assert {r["account"] for r in listed} == {theirs.account_id}
    for path in ("/api/audit", "/api/audit/export.csv", "/api/audit/export.jsonl"):
        answer = hostile.get(path, {"account": mine.account_id})
        assert answer.status_code == 404, path
        assert answer.json()["error"]["code"] == "LM-2004"
    exported = body(hostile.get("/api/audit/export.jsonl"))
    assert {json.loads(line)["account"] for line in exported.splitlines()} == {theirs.account_id}
    browser = owner(theirs)
    for path in ("audit/", "audit.csv", "audit.jsonl"):
        assert browser.get(f"/dashboard/{mine.account_id}/{path}").status_code == 404


def test_viewers_may_not_read_the_trail():
    tenant = make_tenant()
    browser, client = viewer(tenant)

    refused_api = client.get("/api/audit", {"account": tenant.account_id})
    assert refused_api.status_code == 403
    assert refused_api.json()["error"]["code"] == "LM-1003"
    assert client.get("/api/audit").json()["results"] == []  # manages no account
    assert browser.get(f"/dashboard/{tenant.account_id}/audit/").status_code == 403
    assert browser.get(f"/dashboard/{tenant.account_id}/audit.csv").status_code == 403
    overview = browser.get(f"/dashboard/{tenant.account_id}/").content.decode()
    assert f"/dashboard/{tenant.account_id}/audit/" not in overview
    assert f"/dashboard/{tenant.account_id}/audit/" in (
        owner(tenant).get(f"/dashboard/{tenant.account_id}/").content.decode()
    )


# ---------------------------------------------------------------- exports


def test_csv_and_json_lines_exports_hold_the_entries_exactly():
    tenant = make_tenant(budget_micro=5_000_000)
    api(tenant).patch(f"/api/groups/{tenant.group_id}", {"budget_max_micro": 7_500_000})
    Group.objects.filter(pk=tenant.group_id).update(name="=HYPERLINK(1)")
    api(tenant).patch(f"/api/groups/{tenant.group_id}", {"rpm_limit": 60})
    entries = list(reversed(trail(tenant.account_id)))  # newest first, as exported

    for get in (
        lambda fmt: api(tenant).get(f"/api/audit/export.{fmt}"),
        lambda fmt: owner(tenant).get(f"/dashboard/{tenant.account_id}/audit.{fmt}"),
    ):
        as_csv, as_jsonl = get("csv"), get("jsonl")
        assert as_csv["Content-Type"] == "text/csv; charset=utf-8"
        assert as_csv["Content-Disposition"] == 'attachment; filename="audit.csv"'
        assert as_jsonl["Content-Type"] == "application/x-ndjson; charset=utf-8"
        rows = csv_rows(body(as_csv))
        assert rows == [expected_csv(e) for e in entries]
        lines = [json.loads(line) for line in body(as_jsonl).splitlines()]
        assert lines == [e.as_record() for e in entries]

    update = next(r for r in rows if r["action"] == "group.update")
    assert update["summary"] == "rpm limit: none → 60"
    assert update["target_label"] == "'=HYPERLINK(1)"  # a spreadsheet never runs it
    budget = [r for r in rows if r["action"] == "group.update"][-1]
    assert budget["summary"] == "budget max: $5.00 → $7.50"
    assert json.loads(budget["before"]) == {"budget_max_micro": 5_000_000}

    only_keys = csv_rows(body(api(tenant).get("/api/audit/export.csv", {"action": "key"})))
    assert [r["action"] for r in only_keys] == ["key.create"]


# ---------------------------------------------------------------- the admin (all accounts)


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_superuser("root", "root@example.invalid", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_operators_read_search_filter_and_export_every_accounts_trail(operator):
    first, second = make_tenant(), make_tenant()
    listing = operator.get("/django-admin/audit/auditentry/").content.decode()
    for tenant in (first, second):
        for entry in trail(tenant.account_id):
            assert f'href="/django-admin/audit/auditentry/{entry.pk}/change/' in listing
    assert 'id="audit-export-csv"' in listing and 'id="audit-export-jsonl"' in listing

    one = operator.get("/django-admin/audit/auditentry/", {"account": second.account_id})
    shown = {int(pk) for pk in _linked_ids(one.content.decode())}
    assert shown == {e.pk for e in trail(second.account_id)}
    searched = operator.get("/django-admin/audit/auditentry/", {"q": "wallet.opening"})
    shown = {int(pk) for pk in _linked_ids(searched.content.decode())}
    assert shown == {e.pk for e in AuditEntry.objects.filter(action="wallet.opening")}

    filtered = body(
        operator.get("/django-admin/audit/auditentry/export.jsonl", {"action": "key.create"})
    )
    keys = [json.loads(line) for line in filtered.splitlines()]
    assert keys == [
        e.as_record() for e in AuditEntry.objects.filter(action="key.create").order_by("-id")
    ]
    everything = csv_rows(body(operator.get("/django-admin/audit/auditentry/export.csv")))
    assert everything == [expected_csv(e) for e in AuditEntry.objects.order_by("-id")]

    chosen = trail(first.account_id)[:2]
    exported = operator.post(
        "/django-admin/audit/auditentry/",
        {"action": "export_jsonl", "_selected_action": [str(e.pk) for e in chosen]},
    )
    assert [json.loads(line) for line in body(exported).splitlines()] == [
        e.as_record() for e in reversed(chosen)
    ]
    entry = trail(first.account_id)[-1]
    page = operator.get(f"/django-admin/audit/auditentry/{entry.pk}/change/").content.decode()
    assert entry.hash in page and "balance: $0.00 → $100.00" in page


def test_the_admin_cannot_add_change_or_delete_an_entry(operator):
    tenant = make_tenant()
    entry = trail(tenant.account_id)[0]
    base = "/django-admin/audit/auditentry/"
    assert operator.get(f"{base}add/").status_code == 403
    assert operator.post(f"{base}{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert operator.post(f"{base}{entry.pk}/change/", {"action": "x"}).status_code == 403
    bulk = operator.post(base, {"action": "delete_selected", "_selected_action": [str(entry.pk)]})
    assert bulk.status_code in (200, 302)
    assert AuditEntry.objects.get(pk=entry.pk).action == "account.create"


def _linked_ids(html: str) -> list[str]:
    import re

    return re.findall(r'href="/django-admin/audit/auditentry/(\d+)/change/', html)
