"""Receipts are chained per account, signed per batch, and written with the charge they prove.

The chain: each receipt's body names its account's previous receipt's hash and its place
(`seq`); the last receipt of each account in a batch is signed with the operator's Ed25519
key, and covers the ones before it. The transaction: a gateway killed while its writer waits
to append a receipt leaves neither the row, nor its charge, nor the receipt; the journal's
replay then stores all three.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime

import httpx
import orjson
import psycopg
import pytest
from django.db import connection

from accounts.models import Group
from audit.heads import LOCK_SPACE
from audit.models import SignedHead
from billing.models import Receipt, SettledRequest
from billing.receipt_keys import receipt_keys
from billing.receipts import GENESIS, Draft, append, digest, receipt_head, verify_chain
from core.sqlexec import run_sync
from tests.support.profiles import install_profiles
from tests.support.services import clear_shared_state, requires_postgres, requires_redis
from tests.support.stacks import Stack
from tests.support.waits import wait_until
from usage.models import UsageLog
from usage.writer import drain_journal_sync

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def draft(account_id: int, n: int) -> Draft:
    return Draft(
        account_id=account_id,
        request_id=f"req-{account_id}-{n}",
        kind="charge",
        group_id=account_id * 10,
        api_key_id=None,
        cost_micro=100 * n,
        bandwidth_micro=n,
        detail={"model_served": "gpt-4o-mini"},
    )


def as_dicts(receipts) -> list[dict]:
    return [
        {"body": r.body, "hash": r.hash, "signature": r.signature, "key_id": r.key_id}
        for r in receipts
    ]


@pytest.mark.django_db(transaction=True)
def test_a_batch_chains_each_account_and_signs_its_last_receipt():
    assert run_sync(append([draft(1, 1), draft(2, 1), draft(1, 2), draft(1, 3)], now=NOW)) == 4
    assert run_sync(append([draft(2, 2)], now=NOW)) == 1

    ones = list(Receipt.objects.filter(account_id=1).order_by("seq"))
    assert [(r.seq, r.request_id, r.cost_micro) for r in ones] == [
        (1, "req-1-1", 100),
        (2, "req-1-2", 200),
        (3, "req-1-3", 300),
    ]
    assert [r.prev_hash for r in ones] == [GENESIS, ones[0].hash, ones[1].hash]
    assert [bool(r.signature) for r in ones] == [False, False, True]  # the batch's last only
    for r in ones:
        assert digest(r.body.encode()) == r.hash
        body = orjson.loads(r.body)
        assert (body["seq"], body["prev"], body["amounts"]) == (
            r.seq,
            r.prev_hash,
            {
                "provider_cost_micro": r.cost_micro,
                "bandwidth_micro": r.bandwidth_micro,
                "total_micro": r.cost_micro + r.bandwidth_micro,
                "uncollected_micro": 0,
            },
        )
    twos = list(Receipt.objects.filter(account_id=2).order_by("seq"))
    assert [(r.seq, bool(r.signature)) for r in twos] == [(1, True), (2, True)]
    assert twos[1].prev_hash == twos[0].hash
    heads = {account: receipt_head(account) for account in (1, 2)}
    assert heads == {1: (3, ones[-1].hash), 2: (2, twos[-1].hash)}

    public = receipt_keys().public()
    assert verify_chain(as_dicts(ones), public, head=heads[1]) == []
    # A changed amount, a receipt left out, and an unsigned tail are each found.
    changed = as_dicts(ones)
    changed[1]["body"] = changed[1]["body"].replace('"total_micro":202', '"total_micro":2')
    assert [str(p) for p in verify_chain(changed, public)] == [
        "receipt 2: its body does not match its hash (changed)"
    ]
    assert [str(p) for p in verify_chain(as_dicts([ones[0], ones[2]]), public)] == [
        "receipt 3: follows receipt 1 (missing or reordered)"
    ]
    assert [str(p) for p in verify_chain(as_dicts(ones[:2]), public, head=heads[1])] == [
        "receipt 2: the chain ends on an unsigned receipt",
        "receipt 3: the chain's head is receipt 3: cut off",
    ]


@pytest.fixture
def gateway_stack(transactional_db, spawn_gateway, stub, own_redis) -> Stack:
    """A gateway with a Redis of its own: no other gateway of the session claims its journal."""
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    gateway = spawn_gateway(REDIS_URL=own_redis.url, TOLLGATE_USAGE_FLUSH_MS="50")
    return Stack(gateway=gateway, stub=stub)


def ask(stack: Stack, tenant) -> str:
    response = httpx.post(
        f"{stack.url}/v1/chat/completions",
        timeout=30,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]},
    )
    assert response.status_code == 200
    return response.headers["x-tollgate-request-id"]


@requires_postgres
@requires_redis
@pytest.mark.timeout(120)
def test_a_gateway_killed_before_its_receipt_commits_leaves_neither_charge_nor_receipt(
    gateway_stack, own_redis
):
    tenant = gateway_stack.tenant(invoiced=True)
    first = ask(gateway_stack, tenant)
    wait_until(lambda: Receipt.objects.filter(request_id=first).exists(), what="the receipt")
    settled_before = Group.objects.get(pk=tenant.group_id).settled_micro
    assert settled_before > 0
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], user=db.get("USER") or None, host=db.get("HOST") or "127.0.0.1"
    ) as blocker:
        # Hold the account's chain: the writer stores the row and moves the money, then
        # waits here to append the receipt, all in one transaction.
        blocker.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)",
            [LOCK_SPACE[SignedHead.Chain.RECEIPTS], tenant.account_id],
        )
        second = ask(gateway_stack, tenant)

        def writer_waits_on_the_chain() -> bool:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE %s",
                    ["%pg_advisory_xact_lock%"],
                )
                return cursor.fetchone()[0] == 1

        wait_until(writer_waits_on_the_chain, what="the writer at the chain's head")
        gateway_stack.gateway.stop(signal.SIGKILL)
        blocker.rollback()

    # Killed mid-transaction: the row, its charge and its receipt are all gone together.
    wait_until(
        lambda: (
            not UsageLog.objects.filter(request_id=second).exists()
            and Group.objects.get(pk=tenant.group_id).settled_micro == settled_before
        ),
        what="the killed transaction rolled back",
    )
    assert not SettledRequest.objects.filter(request_id=second).exists()
    assert not Receipt.objects.filter(request_id=second).exists()

    # The journal still holds the row: its replay stores all three.
    assert drain_journal_sync(own_redis.url, idle_ms=0) == 1  # its reader is dead
    row = UsageLog.objects.get(request_id=second)
    group = Group.objects.get(pk=tenant.group_id)
    assert group.settled_micro == settled_before + row.provider_cost_micro
    receipts = list(Receipt.objects.filter(account_id=tenant.account_id).order_by("seq"))
    assert [(r.request_id, r.cost_micro) for r in receipts] == [
        (first, settled_before),
        (second, row.provider_cost_micro),
    ]
    assert verify_chain(as_dicts(receipts), receipt_keys().public()) == []
    # What the receipt says: the attempt that served, who paid, its tokens, prices and amount.
    body = orjson.loads(receipts[1].body)
    prices = {
        "input_micro_per_mtok": 150_000,
        "output_micro_per_mtok": 600_000,
        "cached_input_micro_per_mtok": 150_000,
        "cache_write_micro_per_mtok": 150_000,
    }
    tokens = {
        "input": row.tokens_in,
        "output": row.tokens_out,
        "cache_read": 0,
        "cache_write": 0,
        "reasoning": 0,
    }
    assert [
        (a["provider"], a["model"], a["paid_by"], a["outcome"], a["tokens"], a["prices"])
        for a in body["attempts"]
    ] == [(row.provider, "gpt-4o-mini", "platform", "ok", tokens, prices)]
    assert row.provider_cost_micro == -(
        -(row.tokens_in * 150_000 + row.tokens_out * 600_000) // 1_000_000
    )
    assert (body["request_id"], body["account_id"], body["group_id"], body["api_key_id"]) == (
        second,
        tenant.account_id,
        tenant.group_id,
        tenant.api_key_id,
    )
    assert body["amounts"] == {
        "provider_cost_micro": row.provider_cost_micro,
        "bandwidth_micro": row.bandwidth_charge_micro,
        "total_micro": row.provider_cost_micro + row.bandwidth_charge_micro,
        "uncollected_micro": 0,
    }
    assert body["bytes"] == {"in": row.bytes_in, "out": row.bytes_out}
