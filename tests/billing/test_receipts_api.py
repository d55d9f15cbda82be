"""Tenants read their receipts through the tenant API and verify them with the published key.

Real requests go through a real gateway (the official SDKs, the stub vendor behind it); the
gateway's writer stores each usage row with its charge and its receipt in one transaction.
Then, over HTTP on the same process's control plane: each request's receipt by request id
(its amounts exactly the row's, its proof reaching a signature), the month's receipts in
chain order page by page, the month's signed statement, the public keys without a token,
and another tenant refused with 404s that confirm nothing. The docs' verification snippet
(docs/tenant-api.md, "Receipts: verify your bill offline") is run as written against them.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import datetime, timedelta

import httpx
import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import Group
from billing.models import LedgerEntry, Receipt, Wallet
from billing.receipt_codec import pack
from billing.receipt_keys import receipt_keys
from billing.receipts import Draft, append, verify_chain, verify_statement
from billing.statements import month_of
from core.money import TokenPrices
from core.sqlexec import run_sync
from tests.support.processes import ROOT
from tests.support.stacks import Stack
from tests.support.tenants import Tenant
from tests.support.usage import set_bandwidth_rate, settled

pytestmark = pytest.mark.timeout(120)
HEADER = "x-tollgate-request-id"
MINI = {"input_micro_per_mtok": 150_000, "output_micro_per_mtok": 600_000}
HAIKU = {"input_micro_per_mtok": 800_000, "output_micro_per_mtok": 4_000_000}


def api(stack: Stack, tenant: Tenant | None, path: str, **params) -> httpx.Response:
    headers = {"Authorization": f"Token {tenant.api_token}"} if tenant else {}
    return httpx.get(f"{stack.url}{path}", params=params, headers=headers, timeout=30)


def send_three(stack: Stack, tenant: Tenant) -> dict[str, dict]:
    """One request of each kind through the official SDKs; return each id's model prices."""
    openai = stack.openai(tenant)
    sent = {}
    plain = openai.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "a receipt, please"}]
    )
    assert plain.parse().choices[0].message.content
    sent[plain.headers[HEADER]] = MINI
    with openai.chat.completions.with_streaming_response.create(
        model="gpt-4o-mini",
        stream=True,
        messages=[{"role": "user", "content": "a streamed receipt, please"}],
    ) as streamed:
        assert [chunk for chunk in streamed.parse()]
        sent[streamed.headers[HEADER]] = MINI
    anthropic = stack.anthropic(tenant).messages.with_raw_response.create(
        model="claude-3-5-haiku",
        max_tokens=64,
        messages=[{"role": "user", "content": "and one in Anthropic's shape"}],
    )
    assert anthropic.parse().content
    sent[anthropic.headers[HEADER]] = HAIKU
    return sent


def published(stack: Stack) -> dict[str, str]:
    response = api(stack, None, "/api/receipts/keys")
    assert response.status_code == 200
    return {k["key_id"]: k["public_key"] for k in response.json()["keys"]}


def test_each_request_has_a_receipt_with_its_exact_charge_and_a_proof_that_verifies(stack):
    tenant = stack.tenant(wallet_micro=50_000_000)
    set_bandwidth_rate(tenant)  # 1 micro-USD a byte: the bandwidth charge is the bytes
    sent = send_three(stack, tenant)
    rows = {row.request_id: row for row in settled(tenant, 3)}
    assert set(rows) == set(sent)
    keys = published(stack)
    assert keys == receipt_keys().public()

    for request_id, prices in sent.items():
        row = rows[request_id]
        response = api(stack, tenant, f"/api/receipts/{request_id}")
        assert response.status_code == 200
        answer = response.json()
        assert answer["request_id"] == request_id
        [receipt] = answer["results"]
        cost = TokenPrices.configured(**prices).cost_micro(
            tokens_in=row.tokens_in, tokens_out=row.tokens_out
        )
        assert cost > 0 and row.bandwidth_charge_micro == row.bytes_in + row.bytes_out > 0
        assert row.provider_cost_micro == cost
        document = receipt["document"]
        assert (receipt["kind"], receipt["account_id"], document["request_id"]) == (
            "charge",
            tenant.account_id,
            request_id,
        )
        assert document["amounts"] == {
            "provider_cost_micro": cost,
            "bandwidth_micro": row.bandwidth_charge_micro,
            "total_micro": cost + row.bandwidth_charge_micro,
            "uncollected_micro": 0,
        }
        assert (document["paid_by"], document["group_id"], document["api_key_id"]) == (
            "platform",
            tenant.group_id,
            tenant.api_key_id,
        )
        assert document["tokens"]["input"] == row.tokens_in
        assert document["tokens"]["output"] == row.tokens_out
        assert document["bytes"] == {"in": row.bytes_in, "out": row.bytes_out}
        [served] = document["attempts"]
        assert (served["paid_by"], served["provider_cost_micro"]) == ("platform", cost)
        assert {k: served["prices"][k] for k in prices} == prices
        # The body is the exact text the hash covers, and its proof reaches a signature.
        assert hashlib.sha256(receipt["body"].encode()).hexdigest() == receipt["hash"]
        chain = [receipt, *receipt["proof"]]
        assert chain[-1]["signature"] and not any(r["signature"] for r in chain[:-1])
        assert [r["seq"] for r in chain] == list(range(receipt["seq"], receipt["seq"] + len(chain)))
        assert verify_chain(chain, keys) == []

    # What the receipts prove is what the group's settled counter moved by.
    group = Group.objects.get(pk=tenant.group_id)
    assert group.settled_micro == sum(r.provider_cost_micro for r in rows.values())
    assert group.spent_micro == sum(
        r.provider_cost_micro + r.bandwidth_charge_micro for r in rows.values()
    )


def test_a_month_lists_in_chain_order_page_by_page_and_its_statement_is_signed(stack):
    tenant = stack.tenant(wallet_micro=50_000_000)
    set_bandwidth_rate(tenant)
    sent = send_three(stack, tenant)
    rows = {row.request_id: row for row in settled(tenant, 3)}
    stored = list(Receipt.objects.filter(account_id=tenant.account_id).order_by("seq"))
    assert [r.seq for r in stored] == [1, 2, 3]
    period = month_of(stored[0].settled_at, time_zone="UTC")

    whole = api(stack, tenant, "/api/receipts", period=period).json()
    assert whole["account_id"] == tenant.account_id and whole["next"] is None
    assert [(r["seq"], r["request_id"]) for r in whole["results"]] == [
        (r.seq, r.request_id) for r in stored
    ]
    assert {r["request_id"] for r in whole["results"]} == set(sent)
    # Two at a time, following `next`: the same chain, which verifies whole.
    walked, page = [], api(stack, tenant, "/api/receipts", period=period, limit=2).json()
    while True:
        walked += page["results"]
        if page["next"] is None:
            break
        assert "after_seq=2" in page["next"]
        page = httpx.get(
            page["next"], headers={"Authorization": f"Token {tenant.api_token}"}, timeout=30
        ).json()
    assert walked == whole["results"]
    keys = published(stack)
    assert verify_chain(walked, keys, head=(stored[-1].seq, stored[-1].hash)) == []
    # from / to: the same moments, a date meaning its 00:00 UTC.
    first = stored[0].settled_at
    assert len(api(stack, tenant, "/api/receipts", **{"from": first.date()}).json()["results"]) == 3
    before = (first - timedelta(seconds=1)).isoformat()
    assert api(stack, tenant, "/api/receipts", to=before).json()["results"] == []

    statement = api(stack, tenant, "/api/receipts/statement", period=period).json()
    cost = sum(r.provider_cost_micro for r in rows.values())
    bandwidth = sum(r.bandwidth_charge_micro for r in rows.values())
    starts = datetime.fromisoformat(f"{period}-01T00:00:00+00:00")
    assert statement == {
        **statement,
        "account_id": tenant.account_id,
        "period": period,
        "time_zone": "UTC",
        "starts_at": starts.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "complete": False,
        "receipts": 3,
        "first_seq": 1,
        "last_seq": 3,
        "totals": {
            "provider_cost_micro": cost,
            "bandwidth_micro": bandwidth,
            "total_micro": cost + bandwidth,
            "uncollected_micro": 0,
            "wallet_taken_micro": cost,
        },
        "last_hash": stored[-1].hash,
    }
    assert cost > 0 and bandwidth > 0
    head = stored[-1]
    assert statement["head"] == {
        "seq": 3,
        "hash": head.hash,
        "signature": head.signature,
        "key_id": receipt_keys().newest,
        "settled_at": statement["head"]["settled_at"],
    }
    assert head.signature and statement["key_id"] == receipt_keys().newest
    assert verify_statement(statement, keys) == []
    forged = {**statement, "totals": {**statement["totals"], "total_micro": 1}}
    assert [str(p) for p in verify_statement(forged, keys)] == [
        "the statement does not match its hash (changed)"
    ]
    # A month with nothing settled: no receipts, and the head in force is none yet.
    empty = api(stack, tenant, "/api/receipts/statement", period="2020-01").json()
    assert (empty["receipts"], empty["first_seq"], empty["totals"]["total_micro"]) == (0, None, 0)
    assert empty["head"] is None and empty["complete"] is True
    assert verify_statement(empty, keys) == []


def test_another_tenant_gets_404s_and_no_token_gets_401(stack):
    mine, hostile = stack.tenant(), stack.tenant()
    [request_id] = [
        stack.openai(mine)
        .chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "mine"}]
        )
        .headers[HEADER]
    ]
    settled(mine, 1)
    assert api(stack, mine, f"/api/receipts/{request_id}").status_code == 200

    for path, params in [
        (f"/api/receipts/{request_id}", {}),
        ("/api/receipts", {"account": mine.account_id}),
        ("/api/receipts/statement", {"account": mine.account_id}),
    ]:
        refused = api(stack, hostile, path, **params)
        assert refused.status_code == 404, path
        assert refused.json()["error"]["code"] == "LM-2004"
        assert api(stack, None, path, **params).status_code == 401
    # The hostile tenant's own listing and statement hold nothing of mine.
    assert api(stack, hostile, "/api/receipts").json()["results"] == []
    assert api(stack, hostile, "/api/receipts/statement").json()["receipts"] == 0
    bad = api(stack, mine, "/api/receipts/statement", period="2026-13")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "LM-2001")
    both = api(stack, mine, "/api/receipts", period="2026-12", to="2026-12-02")
    assert both.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_a_request_charged_at_its_hold_then_trued_up_has_two_receipts_each_with_its_proof():
    from rest_framework.test import APIClient

    from tests.support.tenants import make_tenant

    tenant = make_tenant()
    now = timezone.now()

    def draft(request_id: str, kind: str, cost: int) -> Draft:
        return Draft(
            account_id=tenant.account_id,
            request_id=request_id,
            kind=kind,
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            cost_micro=cost,
            bandwidth_micro=0,
            detail={},
        )

    # The reaper's charge at the hold, in a batch with another request's; the true-up later.
    run_sync(
        append([draft("req-late", "unmeasured", 900), draft("req-other", "charge", 5)], now=now)
    )
    run_sync(append([draft("req-late", "trueup", -650)], now=now))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")

    answer = client.get("/api/receipts/req-late").json()

    first, second = answer["results"]
    assert [
        (r["seq"], r["kind"], r["document"]["amounts"]["total_micro"]) for r in answer["results"]
    ] == [
        (1, "unmeasured", 900),
        (3, "trueup", -650),
    ]
    assert [p["seq"] for p in first["proof"]] == [2]  # the batch's last receipt signs it
    assert second["proof"] == [] and second["signature"]
    keys = receipt_keys().public()
    assert verify_chain([first, *first["proof"]], keys) == []
    assert verify_chain([second], keys) == []
    assert client.get("/api/receipts/req-nobody").status_code == 404
    statement = client.get(
        "/api/receipts/statement", {"period": month_of(now, time_zone="UTC")}
    ).json()
    assert statement["totals"]["provider_cost_micro"] == 900 + 5 - 650
    assert (statement["receipts"], statement["head"]["seq"]) == (3, 3)


def test_keys_are_public_and_name_the_newest(stack):
    answer = httpx.get(f"{stack.url}/api/receipts/keys", timeout=30)

    assert answer.status_code == 200
    keys = receipt_keys()
    assert answer.json() == {
        "keys": [
            {
                "key_id": key_id,
                "algorithm": "Ed25519",
                "public_key": public_key,
                "newest": key_id == keys.newest,
            }
            for key_id, public_key in keys.public().items()
        ]
    }


DOC = ROOT / "docs" / "tenant-api.md"
SNIPPET_MARKER = "<!-- tested by: tests/billing/test_receipts_api.py -->\n```python\n"


def documented_snippet() -> str:
    """The Python block the docs show under this file's marker, as written."""
    text = DOC.read_text()
    start = text.index(SNIPPET_MARKER) + len(SNIPPET_MARKER)
    return text[start : text.index("\n```", start)]


def run_snippet(stack: Stack, tenant: Tenant) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "TOLLGATE_URL": stack.url,
        "TOLLGATE_TOKEN": tenant.api_token,
    }
    return subprocess.run(
        [sys.executable, "-c", documented_snippet()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_documented_snippet_verifies_a_chain_and_catches_a_change(stack):
    tenant = stack.tenant(wallet_micro=50_000_000)
    send_three(stack, tenant)
    rows = settled(tenant, 3)
    total = sum(r.provider_cost_micro + r.bandwidth_charge_micro for r in rows)
    snippet = documented_snippet()
    assert "import base64, hashlib, json, os, urllib.request" in snippet

    ran = run_snippet(stack, tenant)
    assert ran.returncode == 0, ran.stderr
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    entries = LedgerEntry.objects.filter(wallet=wallet).count()
    assert ran.stdout == (
        f"3 receipts verified; this month {total} micro-USD\n"
        f"{entries} ledger entries reconciled; balance {wallet.balance_micro} micro-USD\n"
    )
    assert wallet.balance_micro == 50_000_000 - total

    # A ledger commit edited behind the tenant's back (owner rights: the app's role cannot):
    # the receipt that names it says what the wallet paid, and the balance breaks after it.
    commit = LedgerEntry.objects.filter(wallet=wallet, kind="commit").order_by("id").first()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE billing_ledgerentry SET amount_micro = amount_micro - 5000 WHERE id = %s",
            [commit.pk],
        )
    ran = run_snippet(stack, tenant)
    assert ran.returncode == 1
    assert "the ledger took" in ran.stderr.strip().splitlines()[-1]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE billing_ledgerentry SET amount_micro = amount_micro + 5000 WHERE id = %s",
            [commit.pk],
        )

    # A body changed behind the tenant's back: the snippet names the receipt.
    with connection.cursor() as cursor:
        second = Receipt.objects.get(account_id=tenant.account_id, seq=2)
        cursor.execute(
            "UPDATE billing_receipt SET body = %s WHERE id = %s",
            [pack(second.body.replace('"status":200', '"status":201')), second.pk],
        )
    ran = run_snippet(stack, tenant)
    assert ran.returncode == 1
    assert ran.stderr.strip().endswith("AssertionError: 2: changed")

    # A receipt gone from the middle.
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM billing_receipt WHERE account_id = %s AND seq = 2", [tenant.account_id]
        )
    ran = run_snippet(stack, tenant)
    assert ran.returncode == 1
    assert ran.stderr.strip().endswith("AssertionError: 3: missing or reordered")


def test_a_period_is_a_month_in_the_accounts_time_zone():
    from billing.statements import month_bounds, months_around

    assert month_bounds("2026-12", time_zone="UTC") == (
        datetime.fromisoformat("2026-12-01T00:00:00+00:00"),
        datetime.fromisoformat("2027-01-01T00:00:00+00:00"),
    )
    # New York's December starts at 05:00 UTC; its March has a 23-hour day.
    assert month_bounds("2026-12", time_zone="America/New_York") == (
        datetime.fromisoformat("2026-12-01T05:00:00+00:00"),
        datetime.fromisoformat("2027-01-01T05:00:00+00:00"),
    )
    start, end = month_bounds("2026-03", time_zone="America/New_York")
    assert end - start == timedelta(days=31, hours=-1)
    assert months_around("2026-01") == ("2025-12", "2026-02")
    assert months_around("2026-12") == ("2026-11", "2027-01")
    for bad in ("2026-13", "2026-00", "2026-1", "26-12", "", "1969-12"):
        with pytest.raises(ValueError):
            month_bounds(bad, time_zone="UTC")
