"""Receipts reconcile with the ledger: each names the wallet entries that moved its money,
`verify_receipts` matches them (and the balance), and a statement sums the receipts' bodies.

Receipts from real requests through a real gateway. Each change is made behind Tollgate's
back with raw SQL: a ledger commit edited by -5,000, a receipt's cost column edited by +1,
the chain's last receipts deleted. Each is caught, naming what disagrees.
"""

from __future__ import annotations

import orjson
import pytest
from django.utils import timezone

from accounts.models import Account
from billing.models import LedgerEntry, Receipt
from billing.receipt_ledger import reconcile_account
from billing.statements import month_of, statement
from tests.billing.test_verify_receipts import sql, traffic, verify

pytestmark = pytest.mark.timeout(120)


def commits(account_id: int) -> list[LedgerEntry]:
    return list(LedgerEntry.objects.filter(wallet__account_id=account_id, kind="commit"))


def test_each_receipt_names_its_commit_and_the_store_reconciles(stack):
    tenant = traffic(stack, 3)

    entries = {e.id: e for e in commits(tenant.account_id)}
    named = []
    for receipt in Receipt.objects.filter(account_id=tenant.account_id).order_by("seq"):
        body = orjson.loads(receipt.body)
        [entry_id] = body["wallet"]["ledger_entries"]
        assert body["wallet"]["taken_micro"] == -entries[entry_id].amount_micro
        assert body["wallet"]["taken_micro"] == body["amounts"]["provider_cost_micro"] > 0
        named.append(entry_id)
    assert sorted(named) == sorted(entries)
    assert reconcile_account(tenant.account_id) == []
    passed, lines = verify("--account", str(tenant.account_id))
    assert passed, lines


def test_a_ledger_commit_edited_is_caught(stack):
    tenant = traffic(stack, 3)
    entry = commits(tenant.account_id)[1]
    receipt = next(
        r
        for r in Receipt.objects.filter(account_id=tenant.account_id)
        if entry.id in orjson.loads(r.body)["wallet"]["ledger_entries"]
    )
    paid = -entry.amount_micro
    sql("UPDATE billing_ledgerentry SET amount_micro = amount_micro - 5000 WHERE id = %s", entry.id)

    passed, lines = verify("--account", str(tenant.account_id))

    assert not passed
    before = LedgerEntry.objects.get(pk=entry.id).balance_after_micro + paid
    assert lines == [
        f"account {tenant.account_id}: 3 receipts, 2 problems",
        f"  ledger entry {entry.id}: {before} {-paid - 5000:+d} is not its balance after,"
        f" {before - paid}",
        f"  receipt {receipt.seq}: says its wallet paid {paid}; its ledger entries say"
        f" {paid + 5000}",
        "CommandError: 2 problem(s) in 1 of 1 chain(s).",
    ]


def test_a_receipt_cost_column_edited_is_caught_and_never_reaches_a_statement(stack):
    tenant = traffic(stack, 3)
    account = Account.objects.get(pk=tenant.account_id)
    period = month_of(timezone.now(), time_zone=account.time_zone)
    bodies = [
        orjson.loads(b)
        for b in Receipt.objects.filter(account_id=account.pk).values_list("body", flat=True)
    ]
    stated = sum(b["amounts"]["provider_cost_micro"] for b in bodies)
    before = statement(account=account, period=period, now=timezone.now())
    assert before["totals"]["provider_cost_micro"] == stated
    assert before["totals"]["wallet_taken_micro"] == stated
    last = Receipt.objects.filter(account_id=account.pk).order_by("-seq").first()
    assert (before["receipts"], before["last_seq"], before["last_hash"]) == (3, 3, last.hash)
    cost = Receipt.objects.get(account_id=account.pk, seq=2).cost_micro

    sql(
        "UPDATE billing_receipt SET cost_micro = cost_micro + 1 WHERE account_id = %s AND seq = 2",
        account.pk,
    )

    after = statement(account=account, period=period, now=timezone.now())
    assert after["totals"] == before["totals"]  # summed from the bodies, not the column
    passed, lines = verify("--account", str(account.pk))
    assert not passed
    assert f"  receipt 2: its cost_micro says {cost + 1}, its body {cost}" in lines


def test_a_tail_cut_off_leaves_its_ledger_entries_unnamed(stack):
    tenant = traffic(stack, 5)
    cut = {
        orjson.loads(r.body)["wallet"]["ledger_entries"][0]: r.request_id
        for r in Receipt.objects.filter(account_id=tenant.account_id, seq__gte=4)
    }
    sql("DELETE FROM billing_receipt WHERE account_id = %s AND seq >= 4", tenant.account_id)

    problems = [str(p) for p in reconcile_account(tenant.account_id)]

    entries = {e.id: e.amount_micro for e in commits(tenant.account_id)}
    assert problems == [
        f"ledger entry {entry_id} (commit {entries[entry_id]} for request {request_id})"
        " is named by no receipt"
        for entry_id, request_id in sorted(cut.items())
    ]
    passed, lines = verify("--account", str(tenant.account_id))
    assert not passed
    assert all(f"  {p}" in lines for p in problems)
