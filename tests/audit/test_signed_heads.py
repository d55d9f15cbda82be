"""A head the tenant kept catches what the database's owner does to either chain afterwards.

With owner rights (the test's superuser: triggers switched off for its session, the store's
own signed heads deleted too), the issue's attacks: erase a pool's fallback consent, relabel
its actor and re-hash the rest of the trail; cut the trail's tail; cut receipts off the end;
rewrite a receipt and re-hash and re-sign the chain after it (with the operator's key, as
someone holding the app's environment could). The store alone then looks intact; each time,
the head the tenant downloaded earlier (API or dashboard) makes `verify_audit --head` /
`verify_receipts --head` fail, as processes, naming what no longer holds.
"""

from __future__ import annotations

import json
import subprocess

import httpx
import orjson
import pytest
from django.db import connection, transaction
from django.test import Client

from accounts.models import Membership
from audit.chain import entry_hash
from audit.heads import check_kept_head, signature_problems
from audit.models import AuditEntry, SignedHead
from billing.models import Receipt
from billing.receipt_codec import pack
from billing.receipts import canonical, digest
from core.signing import receipt_keys
from tests.support.processes import run_manage
from tests.support.services import requires_postgres
from tests.support.usage import settled

pytestmark = [requires_postgres, pytest.mark.timeout(120)]

# docs/tenant-api.md, "Signed heads", verbatim.
FETCH_RECEIPTS_HEAD = (
    'curl -sS "$TG_URL/api/receipts/head" -H "Authorization: Token $TG_API_TOKEN"'
    " -o receipts-head.json"
)
FETCH_AUDIT_HEAD = (
    'curl -sS "$TG_URL/api/audit/head" -H "Authorization: Token $TG_API_TOKEN" -o audit-head.json'
)
VERIFY_RECEIPTS = "python manage.py verify_receipts --head receipts-head.json"
VERIFY_AUDIT = "python manage.py verify_audit --head audit-head.json"


def shell(command: str, cwd, **env: str) -> subprocess.CompletedProcess:
    """Run a documented line: a manage.py command on the test database, else in a shell."""
    if command.startswith("python manage.py"):
        return run_manage(command, cwd=cwd)
    return subprocess.run(
        ["sh", "-c", command], cwd=cwd, env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip


def as_owner(*statements: tuple[str, list]) -> None:
    """Run statements as the owner, the append-only triggers off for this transaction."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        for statement, params in statements:
            cursor.execute(statement, params)


def rehash_trail(account_id: int, *, from_seq: int) -> None:
    """Recompute every hash and link of the account's trail from `from_seq` on, as stored."""
    entries = list(AuditEntry.objects.filter(account_id=account_id).order_by("seq"))
    prev = entries[from_seq - 2].hash if from_seq > 1 else "0" * 64
    for entry in entries[from_seq - 1 :]:
        record = {**entry.as_record(), "prev_hash": prev}
        new = entry_hash(prev, record)
        as_owner(
            ("UPDATE audit_auditentry SET prev_hash = %s, hash = %s WHERE id = %s",
             [prev, new, entry.pk]),
        )  # fmt: skip
        prev = new


def test_a_kept_audit_head_catches_a_rewritten_trail_and_a_cut_tail(stack, tmp_path):
    tenant = stack.tenant()
    token = {"TG_URL": stack.url, "TG_API_TOKEN": tenant.api_token}
    made = httpx.put(
        f"{stack.url}/admin/groups/{tenant.group_id}/byok/stub-openai",
        headers={"Authorization": f"Token {tenant.api_token}"},
        json={"fallback": True},
        timeout=30,
    )
    assert made.status_code == 200, made.text
    consent = AuditEntry.objects.get(account_id=tenant.account_id, action="pool.fallback.enable")
    assert consent.consent
    shell(FETCH_AUDIT_HEAD, tmp_path, **token)
    kept = json.loads((tmp_path / "audit-head.json").read_text())
    last = AuditEntry.objects.filter(account_id=tenant.account_id).order_by("-seq").first()
    assert (kept["chain"], kept["account_id"], kept["seq"], kept["hash"]) == (
        "audit", tenant.account_id, last.seq, last.hash,
    )  # fmt: skip
    assert signature_problems(kept, receipt_keys().public()) == []
    ok = shell(VERIFY_AUDIT, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"account {tenant.account_id}: {last.seq} entries, intact" in ok.stdout

    # The owner erases the consent, relabels its actor, re-hashes everything after it and
    # removes the heads the database kept: the store alone reads as intact.
    as_owner(
        ("UPDATE audit_auditentry SET consent = '', actor_label = 'system' WHERE id = %s",
         [consent.pk]),
        ("DELETE FROM audit_signedhead WHERE account_id = %s", [tenant.account_id]),
    )  # fmt: skip
    rehash_trail(tenant.account_id, from_seq=consent.seq)
    alone = shell(f"python manage.py verify_audit --account {tenant.account_id}", tmp_path)
    assert alone.returncode == 0, alone.stdout + alone.stderr

    caught = shell(VERIFY_AUDIT, tmp_path)
    assert caught.returncode == 1
    assert (
        f"account {tenant.account_id}: BROKEN after {last.seq} entries: signed head at seq"
        f" {last.seq}: seq {last.seq} no longer carries the kept head's hash (rewritten at or"
        " before it)"
    ) in caught.stdout

    # A tail cut back before the kept head.
    as_owner(
        ("DELETE FROM audit_auditentry WHERE account_id = %s AND seq >= %s",
         [tenant.account_id, consent.seq]),
    )  # fmt: skip
    caught = shell(VERIFY_AUDIT, tmp_path)
    assert caught.returncode == 1
    assert (
        f"signed head at seq {last.seq}: the chain ends at seq {consent.seq - 1}, before the"
        f" kept head's seq {last.seq} (cut or rolled back)"
    ) in caught.stdout


def test_a_kept_receipt_head_catches_a_cut_tail_and_a_resigned_rewrite(stack, tmp_path):
    tenant = stack.tenant(wallet_micro=50_000_000)
    client = stack.openai(tenant)
    for n in range(4):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"kept {n}"}]
        )
    settled(tenant, 4)
    shell(FETCH_RECEIPTS_HEAD, tmp_path, TG_URL=stack.url, TG_API_TOKEN=tenant.api_token)
    kept = json.loads((tmp_path / "receipts-head.json").read_text())
    receipts = list(Receipt.objects.filter(account_id=tenant.account_id).order_by("seq"))
    assert (kept["chain"], kept["seq"], kept["hash"]) == ("receipts", 4, receipts[-1].hash)
    ok = shell(VERIFY_RECEIPTS, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    # Rewrite receipt 2 (a smaller charge) and re-hash and re-sign 2..4 with the key.
    signer = receipt_keys().private[receipt_keys().newest]
    prev = receipts[0].hash
    for receipt in receipts[1:]:
        body = orjson.loads(receipt.body)
        body["prev"] = prev
        if body["seq"] == 2:
            body["amounts"]["provider_cost_micro"] = 1
        text = canonical(body)
        new = digest(text)
        as_owner(
            ("UPDATE billing_receipt SET body = %s, hash = %s, signature = %s,"
             " cost_micro = %s WHERE id = %s",
             [pack(text.decode()), bytes.fromhex(new), signer.sign(bytes.fromhex(new)).hex(),
              body["amounts"]["provider_cost_micro"], receipt.pk]),
        )  # fmt: skip
        prev = new
    as_owner(("DELETE FROM audit_signedhead WHERE account_id = %s", [tenant.account_id]))
    caught = shell(VERIFY_RECEIPTS, tmp_path)
    assert caught.returncode == 1
    assert (
        f"receipt 4: the head signed at {kept['signed_at']}: seq 4 no longer carries the kept"
        " head's hash (rewritten at or before it)"
    ) in caught.stdout

    # Cut the tail back to receipt 2.
    as_owner(("DELETE FROM billing_receipt WHERE account_id = %s AND seq > 2", [tenant.account_id]))
    caught = shell(VERIFY_RECEIPTS, tmp_path)
    assert caught.returncode == 1
    assert (
        f"receipt 4: the head signed at {kept['signed_at']}: the chain ends at seq 2, before"
        " the kept head's seq 4 (cut or rolled back)"
    ) in caught.stdout


def test_statements_and_the_dashboard_hand_out_both_heads_signed(stack):
    tenant = stack.tenant(wallet_micro=5_000_000)
    stack.openai(tenant).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "statement"}]
    )
    settled(tenant, 1)
    auth = {"Authorization": f"Token {tenant.api_token}"}
    statement = httpx.get(f"{stack.url}/api/receipts/statement", headers=auth, timeout=30).json()
    public = receipt_keys().public()
    heads = statement["signed_heads"]
    assert heads["receipts"]["seq"] == 1 and heads["audit"]["chain"] == "audit"
    for kept in heads.values():
        assert signature_problems(kept, public) == []
    trail = AuditEntry.objects.filter(account_id=tenant.account_id).order_by("-seq").first()
    assert (
        check_kept_head(
            heads["audit"], public_keys=public, hash_at_seq=trail.hash, last_seq=trail.seq
        )
        == []
    )
    # A changed head fails its signature.
    assert signature_problems({**heads["audit"], "seq": 1}, public) == [
        "the head's signature does not verify (changed or forged)"
    ]

    # The dashboard hands out the same heads (asking again signs nothing new).
    browser = Client()
    browser.force_login(Membership.objects.get(account_id=tenant.account_id, role="owner").user)
    for path, chain in (("receipts/head.json", "receipts"), ("audit/head.json", "audit")):
        page = browser.get(f"/dashboard/{tenant.account_id}/{path}")
        assert page.status_code == 200
        assert page["Content-Disposition"].startswith("attachment;")
        assert json.loads(page.content) == heads[chain]
    assert SignedHead.objects.filter(account_id=tenant.account_id).count() == 2
