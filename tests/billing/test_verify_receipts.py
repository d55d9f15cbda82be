"""`manage.py verify_receipts` finds every way a stored chain can be tampered with.

Receipts come from real requests through a real gateway (its writer stores each usage row,
its charge and its receipt in one transaction). The command passes on the intact store, and
fails (exit status 1, naming the receipt) after each change made behind Tollgate's back with
raw SQL: a body changed, a receipt deleted from the middle, two receipts reordered, the last
one deleted (a signed head shows it: the one this database kept, or one the tenant kept), a
signature altered. Key rotation:
receipts signed under r1 still verify once r2 signs new ones, and both keys are published.
A tenant's export (JSON lines of the API's receipts) is checked with the published key.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from audit.heads import document
from billing.models import LedgerEntry, Receipt
from billing.receipt_codec import pack
from billing.receipt_keys import receipt_keys
from billing.receipts import signed_receipt_head
from tests.support.processes import run_manage
from tests.support.stacks import Stack
from tests.support.tenants import Tenant
from tests.support.usage import attempt, journal_row, settled, store

pytestmark = pytest.mark.timeout(120)
REQUESTS = 5
# The commands docs/tenant-api.md shows, run here as written.
VERIFY_STORE = "python manage.py verify_receipts"
VERIFY_ONE = 'python manage.py verify_receipts --account "$ACCOUNT" --since 2026-12-01'
VERIFY_HEAD = "python manage.py verify_receipts --head head.json"
VERIFY_EXPORT = 'python manage.py verify_receipts --file receipts.jsonl --public-key "$KEY"'
# A second signing key, for the rotation (a 32-byte seed, base64url).
R2_SEED = base64.urlsafe_b64encode(bytes(range(32))).decode()


def traffic(stack: Stack, count: int = REQUESTS) -> Tenant:
    """A tenant with `count` requests served and settled, one receipt each."""
    tenant = stack.tenant(wallet_micro=50_000_000)
    client = stack.openai(tenant)
    for n in range(count):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"receipt {n}"}]
        )
    settled(tenant, count)
    assert Receipt.objects.filter(account_id=tenant.account_id).count() == count
    return tenant


def verify(*args: str) -> tuple[bool, list[str]]:
    """Run the command in this process: (passed, its output lines)."""
    out = _Capture()
    try:
        call_command("verify_receipts", *args, stdout=out)
    except CommandError as exc:
        return False, [*out.lines(), f"CommandError: {exc}"]
    return True, out.lines()


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass

    def lines(self) -> list[str]:
        return self.text.splitlines()


def sql(statement: str, *params) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_an_intact_store_passes_with_a_line_per_account(stack):
    one, two = traffic(stack, 3), traffic(stack, 2)

    passed, lines = verify("--account", str(one.account_id), "--account", str(two.account_id))

    assert passed
    assert lines == [
        f"account {one.account_id}: 3 receipts, chain intact, head 3 signed by r1",
        f"account {two.account_id}: 2 receipts, chain intact, head 2 signed by r1",
        "2 chain(s) intact.",
    ]
    # As a process, the whole store, exactly as the docs show it: exit status 0.
    ran = run_manage(VERIFY_STORE)
    assert ran.returncode == 0, ran.stderr
    assert f"account {one.account_id}: 3 receipts, chain intact" in ran.stdout


def body_changed(account: int) -> list[str]:
    # An inflated charge, its column moved to match: only the hash can tell.
    receipt = Receipt.objects.get(account_id=account, seq=2)
    cost = receipt.cost_micro
    changed = receipt.body.replace(
        f'"provider_cost_micro":{cost}', f'"provider_cost_micro":{cost * 10}'
    )
    assert changed != receipt.body
    sql(
        "UPDATE billing_receipt SET body = %s, cost_micro = %s WHERE account_id = %s AND seq = 2",
        pack(changed),
        cost * 10,
        account,
    )
    return [
        # Its amounts no longer add up to the running totals it states, nor its bytes to
        # its hash.
        "  receipt 2: its running totals do not follow on",
        "  receipt 2: its body does not match its hash (changed)",
    ]


def column_changed(account: int) -> list[str]:
    cost = Receipt.objects.get(account_id=account, seq=2).cost_micro
    sql("UPDATE billing_receipt SET cost_micro = 1 WHERE account_id = %s AND seq = 2", account)
    return [f"  receipt 2: its cost_micro says 1, its body {cost}"]


def unnamed(account: int, seq: int) -> str:
    """The ledger's line for a receipt about to be deleted: its commit named by no receipt
    (billing/receipt_ledger.py)."""
    receipt = Receipt.objects.get(account_id=account, seq=seq)
    [entry_id] = json.loads(receipt.body)["wallet"]["ledger_entries"]
    amount = LedgerEntry.objects.get(pk=entry_id).amount_micro
    return (
        f"  ledger entry {entry_id} (commit {amount} for request {receipt.request_id})"
        " is named by no receipt"
    )


def deleted_from_the_middle(account: int) -> list[str]:
    ledger = unnamed(account, 3)
    sql("DELETE FROM billing_receipt WHERE account_id = %s AND seq = 3", account)
    return ["  receipt 4: follows receipt 2 (missing or reordered)", ledger]


def reordered(account: int) -> list[str]:
    # Swap receipts 3 and 4 in the chain (through a free seq: (account, seq) is unique).
    sql("UPDATE billing_receipt SET seq = -1 WHERE account_id = %s AND seq = 3", account)
    sql("UPDATE billing_receipt SET seq = 3 WHERE account_id = %s AND seq = 4", account)
    sql("UPDATE billing_receipt SET seq = 4 WHERE account_id = %s AND seq = -1", account)
    return [
        "  receipt 3: its seq says 4, its body 3",
        "  receipt 3: follows receipt 4 (missing or reordered)",
        "  receipt 4: its seq says 3, its body 4",
        "  receipt 4: follows receipt 2 (missing or reordered)",
        "  receipt 5: follows receipt 3 (missing or reordered)",
    ]


def tail_cut_off(account: int) -> list[str]:
    head = document(signed_receipt_head(account))  # as a tenant's dashboard fetches it
    ledger = unnamed(account, REQUESTS)
    sql(f"DELETE FROM billing_receipt WHERE account_id = %s AND seq = {REQUESTS}", account)
    cut = [
        f"  receipt {REQUESTS}: the head signed at {head['signed_at']}: the chain ends at seq"
        f" {REQUESTS - 1}, before the kept head's seq {REQUESTS} (cut or rolled back)"
    ]
    # Receipt 4 signed (its own batch's last): the signed head and the ledger show the cut.
    if Receipt.objects.get(account_id=account, seq=REQUESTS - 1).signature:
        return [*cut, ledger]
    return [f"  receipt {REQUESTS - 1}: the chain ends on an unsigned receipt", *cut, ledger]


def signature_altered(account: int) -> list[str]:
    receipt = Receipt.objects.get(account_id=account, seq=REQUESTS)
    flipped = ("0" if receipt.signature[0] != "0" else "1") + receipt.signature[1:]
    sql(
        "UPDATE billing_receipt SET signature = %s WHERE account_id = %s AND seq = %s",
        flipped,
        account,
        REQUESTS,
    )
    return [f"  receipt {REQUESTS}: its signature does not verify"]


def first_deleted(account: int) -> list[str]:
    ledger = unnamed(account, 1)
    sql("DELETE FROM billing_receipt WHERE account_id = %s AND seq = 1", account)
    return ["  receipt 2: the chain starts here: receipts before it are missing", ledger]


@pytest.mark.parametrize(
    "tamper",
    [
        body_changed,
        column_changed,
        deleted_from_the_middle,
        reordered,
        tail_cut_off,
        signature_altered,
        first_deleted,
    ],
)
def test_a_tampered_store_fails_naming_the_receipt(stack, tamper):
    tenant, bystander = traffic(stack), traffic(stack, 1)
    account = tenant.account_id
    expected = tamper(account)

    passed, lines = verify("--account", str(account), "--account", str(bystander.account_id))

    assert not passed
    count = len(expected)
    kept = REQUESTS - (tamper in (deleted_from_the_middle, tail_cut_off, first_deleted))
    assert lines == [
        f"account {account}: {kept} receipts, {count} problem{'s' if count > 1 else ''}",
        *expected,
        f"account {bystander.account_id}: 1 receipts, chain intact, head 1 signed by r1",
        f"CommandError: {count} problem(s) in 1 of 2 chain(s).",
    ]


def test_the_command_exits_1_as_a_process(stack, tmp_path):
    tenant = traffic(stack, 2)
    kept = httpx.get(
        f"{stack.url}/api/receipts/head",
        headers={"Authorization": f"Token {tenant.api_token}"},
        timeout=30,
    ).json()
    assert (kept["chain"], kept["account_id"], kept["seq"]) == ("receipts", tenant.account_id, 2)
    (tmp_path / "head.json").write_text(json.dumps(kept))
    sql("DELETE FROM billing_receipt WHERE account_id = %s AND seq = 2", tenant.account_id)

    ran = run_manage(VERIFY_HEAD.replace("head.json", str(tmp_path / "head.json")))

    assert ran.returncode == 1
    assert f"account {tenant.account_id}: 1 receipts," in ran.stdout
    assert (
        "receipt 2: the head signed at"
        f" {kept['signed_at']}: the chain ends at seq 1, before the kept head's seq 2"
    ) in ran.stdout
    assert "problem(s)" in ran.stderr


def test_since_checks_from_a_moment_and_still_catches_a_cut_off_tail(stack):
    tenant = traffic(stack, 3)
    third = Receipt.objects.get(account_id=tenant.account_id, seq=3)
    since = Receipt.objects.filter(
        account_id=tenant.account_id, settled_at__gte=third.settled_at
    ).count()  # receipt 3, and those settled in its batch

    passed, lines = verify(
        "--account", str(tenant.account_id), "--since", third.settled_at.isoformat()
    )
    assert passed
    assert lines[0] == (
        f"account {tenant.account_id}: {since} receipts, chain intact, head 3 signed by r1"
    )
    # The documented form, as a process: a date is its 00:00 UTC.
    day = third.settled_at.date().isoformat()
    ran = run_manage(
        VERIFY_ONE.replace('"$ACCOUNT"', str(tenant.account_id)).replace("2026-12-01", day)
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.startswith(f"account {tenant.account_id}: ")

    head = document(signed_receipt_head(tenant.account_id))
    sql("DELETE FROM billing_receipt WHERE account_id = %s AND seq = 3", tenant.account_id)
    passed, lines = verify("--account", str(tenant.account_id), "--since", "2000-01-01")
    assert not passed
    assert lines[-3] == (
        f"  receipt 3: the head signed at {head['signed_at']}: the chain ends at seq 2,"
        " before the kept head's seq 3 (cut or rolled back)"
    )


def test_a_tenants_export_verifies_with_the_published_key_and_fails_when_changed(stack, tmp_path):
    tenant = traffic(stack, 3)
    headers = {"Authorization": f"Token {tenant.api_token}"}
    page = httpx.get(f"{stack.url}/api/receipts", headers=headers, timeout=30).json()
    key = httpx.get(f"{stack.url}/api/receipts/keys", timeout=30).json()["keys"][0]
    export = tmp_path / "receipts.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in page["results"]))

    ran = run_manage(
        VERIFY_EXPORT.replace('"$KEY"', key["public_key"]).replace("receipts.jsonl", str(export))
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == [
        f"account {tenant.account_id}: 3 receipts, chain intact, head 3 signed by r1",
        "1 chain(s) intact.",
    ]

    lines = export.read_text().splitlines()
    changed = json.loads(lines[1])
    changed["body"] = changed["body"].replace('"status":200', '"status":500')
    export.write_text("\n".join([lines[0], json.dumps(changed), lines[2]]) + "\n")
    passed, out = verify("--file", str(export), "--public-key", key["public_key"])
    assert not passed
    assert "  receipt 2: its body does not match its hash (changed)" in out
    # The wrong key: every signature fails.
    other = base64.urlsafe_b64encode(bytes(32)).decode().rstrip("=")
    export.write_text("\n".join(lines) + "\n")
    passed, out = verify("--file", str(export), "--public-key", f"r1:{other}")
    assert not passed and "  receipt 3: its signature does not verify" in out


def test_receipts_signed_under_r1_still_verify_after_rotating_to_r2(stack, spawn_gateway, settings):
    tenant = traffic(stack, 2)  # signed with r1
    r1 = settings.RECEIPT_KEYS
    rotated = f"r2:{R2_SEED},{r1}"
    settings.RECEIPT_KEYS = rotated
    receipt_keys.cache_clear()
    try:
        # New rows stored by a writer under the rotated keys: signed with r2.
        store(
            journal_row(
                account_id=tenant.account_id,
                group_id=tenant.group_id,
                api_key_id=tenant.api_key_id,
                provider_cost_micro=7,
                attempts=[attempt()],
            )
        )
        receipts = list(Receipt.objects.filter(account_id=tenant.account_id).order_by("seq"))
        # (Receipt 1 may share receipt 2's batch, and its signature.)
        assert [(r.seq, r.key_id) for r in receipts[1:]] == [(2, "r1"), (3, "r2")]
        assert receipts[0].key_id in ("", "r1")
        passed, lines = verify("--account", str(tenant.account_id))
        assert passed
        assert (
            lines[0]
            == f"account {tenant.account_id}: 3 receipts, chain intact, head 3 signed by r2"
        )
        # Both published by a control plane running with the rotated keys, r2 the newest.
        rotated_gateway = spawn_gateway(TOLLGATE_RECEIPT_KEYS=rotated)
        keys = httpx.get(f"{rotated_gateway.url}/api/receipts/keys", timeout=30).json()["keys"]
        assert [(k["key_id"], k["newest"]) for k in keys] == [("r2", True), ("r1", False)]
        assert {k["key_id"]: k["public_key"] for k in keys} == receipt_keys().public()
        # Dropping r1 from the list would orphan what it signed: the command says so.
        ran = run_manage(
            f"{VERIFY_STORE} --account {tenant.account_id}", TOLLGATE_RECEIPT_KEYS=f"r2:{R2_SEED}"
        )
        assert ran.returncode == 1
        assert "  receipt 2: signed with an unknown key 'r1'" in ran.stdout
    finally:
        receipt_keys.cache_clear()
