"""A request charged at its hold is trued up to its measured cost when its row arrives late.

The gateway answers, journals each row to Redis and is killed (SIGKILL) before its writer
stores them. The reaper finds the holds expired and the calls sent: it charges each request
at its hold, unmeasured. Then the journal is drained (as a surviving replica or the Celery
drain would): each late row trues its request up to what it measured, once (one ledger entry
for the wallet's difference, the counters moved by the difference, a `trueup` receipt), and
the usage events' cost equals what the groups' settled cost moved, window by window.
"""

from __future__ import annotations

import signal
import threading
from collections import defaultdict
from datetime import timedelta

import httpx
import pytest
import redis
from django.utils import timezone

from accounts.models import Group
from billing.models import LedgerEntry, Receipt, Reservation, SettledRequest, Wallet
from billing.reaper import expire_stale_holds
from billing.receipt_keys import receipt_keys
from billing.receipts import verify_chain
from tests.support.profiles import install_profiles
from tests.support.services import clear_shared_state, requires_postgres, requires_redis
from tests.support.stacks import Stack
from usage.models import UsageEvent, UsageLog
from usage.services import event_schema_validator, usage_events_flush, window_floor
from usage.writer import JOURNAL, drain_journal_sync, store_journaled

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(120)]
WALLET = 1_000_000
TTL_S = 4
PER_TENANT = 4
WINDOW_S = 60


@pytest.fixture
def slow_writer(transactional_db, spawn_gateway, stub, own_redis) -> Stack:
    """A gateway whose writer would store its journal only after ten minutes.

    Its Redis is its own: the session's other gateways would otherwise drain its journal.
    """
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    gateway = spawn_gateway(
        REDIS_URL=own_redis.url,
        TOLLGATE_RESERVATION_TTL_S=str(TTL_S),
        TOLLGATE_REQUEST_DEADLINE_S=str(TTL_S),
        TOLLGATE_USAGE_FLUSH_MS="600000",
    )
    return Stack(gateway=gateway, stub=stub)


@pytest.fixture(autouse=True)
def events_every_minute(settings):
    settings.TOLLGATE = {**settings.TOLLGATE, "USAGE_WINDOW_S": WINDOW_S, "USAGE_GRACE_S": 0}


def ask(stack: Stack, tenant, n: int, answered: dict) -> None:
    response = httpx.post(
        f"{stack.url}/v1/chat/completions",
        timeout=30,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={
            "model": "gpt-4o-mini",
            "stream": bool(n % 2),
            "max_tokens": 100,
            "messages": [{"role": "user", "content": f"hello there {n}"}],
        },
    )
    assert response.status_code == 200
    answered[n] = response.headers["x-tollgate-request-id"]


def test_late_rows_true_up_what_the_reaper_charged_at_the_hold(slow_writer, own_redis):
    prepaid = slow_writer.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    invoiced = slow_writer.tenant(invoiced=True)
    tenants = {prepaid.group_id: prepaid, invoiced.group_id: invoiced}
    answered: dict[int, str] = {}
    clients = [
        threading.Thread(target=ask, args=(slow_writer, tenant, n, answered))
        for n, tenant in enumerate([prepaid] * PER_TENANT + [invoiced] * PER_TENANT)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join(30)
    assert len(answered) == 2 * PER_TENANT
    journal = redis.Redis.from_url(own_redis.url)
    entries = [fields[b"row"] for _, fields in journal.xrange(JOURNAL)]
    assert len(entries) == 2 * PER_TENANT  # every answer journaled, none stored
    slow_writer.gateway.stop(signal.SIGKILL)
    assert not UsageLog.objects.filter(group_id__in=tenants).exists()

    # The reaper: every request was served, none has its row: each is charged at its hold.
    # (Its clock a window ahead, so its charges and the true-ups fall in different windows.)
    reaped_at = timezone.now() + timedelta(seconds=WINDOW_S)
    expire_stale_holds(now=reaped_at)
    at_hold = dict(
        SettledRequest.objects.filter(group_id__in=tenants).values_list(
            "request_id", "provider_cost_micro"
        )
    )
    assert sorted(at_hold) == sorted(answered.values())
    assert set(SettledRequest.objects.filter(group_id__in=tenants).values_list("source")) == {
        ("reaper",)
    }
    reserved = dict(
        Reservation.objects.filter(wallet__account_id=prepaid.account_id).values_list(
            "request_id", "amount_micro"
        )
    )
    assert Wallet.objects.get(account_id=prepaid.account_id).balance_micro == WALLET - sum(
        reserved.values()
    )

    # The late rows arrive.
    assert drain_journal_sync(own_redis.url, idle_ms=0) == 2 * PER_TENANT
    rows = {row.request_id: row for row in UsageLog.objects.filter(group_id__in=tenants)}
    assert sorted(rows) == sorted(answered.values())
    assert all(0 < row.provider_cost_micro < at_hold[rid] for rid, row in rows.items())
    books_after_true_up = assert_trued_up(prepaid, tenants, rows, at_hold, reserved)

    # Resolve once: the same rows again, and the reaper again, change nothing.
    assert store_journaled(entries) == 0
    expire_stale_holds(now=reaped_at + timedelta(seconds=TTL_S))
    assert books(prepaid, tenants) == books_after_true_up

    # The usage events' cost is what each group's settled cost moved, window by window:
    # the holds in the reaper's window, the true-ups in the late rows' window (negative here:
    # the holds were more than the measured cost).
    usage_events_flush(now=reaped_at + timedelta(seconds=3 * WINDOW_S))
    for group_id in tenants:
        events = {
            e.window_start: e.payload
            for e in UsageEvent.objects.filter(group_id=group_id).order_by("window_start")
        }
        moved: dict = defaultdict(int)
        for rid, row in rows.items():
            if row.group_id != group_id:
                continue
            moved[window_floor(reaped_at, window_s=WINDOW_S)] += at_hold[rid]
            late = window_floor(row.stored_at, window_s=WINDOW_S)
            moved[late] += row.provider_cost_micro - at_hold[rid]
        assert {w: e["units"]["provider_cost_micro_usd"] for w, e in events.items()} == dict(moved)
        assert len(moved) == 2 and min(moved.values()) < 0
        assert sum(moved.values()) == Group.objects.get(pk=group_id).settled_micro
        for payload in events.values():
            event_schema_validator().validate(payload)


def assert_trued_up(prepaid, tenants, rows, at_hold, reserved) -> tuple:
    for group_id in tenants:
        group = Group.objects.get(pk=group_id)
        own = [row for row in rows.values() if row.group_id == group_id]
        cost = sum(row.provider_cost_micro for row in own)
        bandwidth = sum(row.bandwidth_charge_micro for row in own)
        assert (group.settled_micro, group.spent_micro, group.reserved_micro) == (
            cost,
            cost + bandwidth,
            0,
        )
    markers = SettledRequest.objects.filter(group_id__in=tenants)
    assert {(m.request_id, m.source, m.provider_cost_micro) for m in markers} == {
        (rid, "trueup", row.provider_cost_micro) for rid, row in rows.items()
    }
    # The wallet: each reservation committed again at the measured cost, the difference
    # given back with one `trueup` entry each.
    wallet = Wallet.objects.get(account_id=prepaid.account_id)
    prepaid_rows = {rid: row for rid, row in rows.items() if row.group_id == prepaid.group_id}
    assert (wallet.balance_micro, wallet.reserved_micro) == (
        WALLET - sum(row.provider_cost_micro for row in prepaid_rows.values()),
        0,
    )
    assert sorted(
        LedgerEntry.objects.filter(wallet=wallet, kind="trueup").values_list(
            "reason", "amount_micro"
        )
    ) == sorted(
        (f"trueup: request {rid}", reserved[rid] - row.provider_cost_micro)
        for rid, row in prepaid_rows.items()
    )
    assert {
        (r.request_id, r.committed_micro, r.unmeasured)
        for r in Reservation.objects.filter(wallet=wallet)
    } == {(rid, row.provider_cost_micro, False) for rid, row in prepaid_rows.items()}
    # The receipts prove both charges: at the hold, then the difference.
    for tenant in tenants.values():
        receipts = list(Receipt.objects.filter(account_id=tenant.account_id).order_by("seq"))
        by_request = defaultdict(list)
        for receipt in receipts:
            by_request[receipt.request_id].append((receipt.kind, receipt.cost_micro))
        assert dict(by_request) == {
            rid: [("unmeasured", at_hold[rid]), ("trueup", row.provider_cost_micro - at_hold[rid])]
            for rid, row in rows.items()
            if row.group_id == tenant.group_id
        }
        public = receipt_keys().public()
        assert verify_chain([receipt_dict(r) for r in receipts], public) == []
    return books(prepaid, tenants)


def receipt_dict(receipt: Receipt) -> dict:
    return {
        "body": receipt.body,
        "hash": receipt.hash,
        "signature": receipt.signature,
        "key_id": receipt.key_id,
    }


def books(prepaid, tenants) -> tuple:
    return (
        sorted(Group.objects.filter(pk__in=tenants).values_list("spent_micro", "settled_micro")),
        Wallet.objects.filter(account_id=prepaid.account_id).values_list("balance_micro").get(),
        LedgerEntry.objects.count(),
        Receipt.objects.count(),
        sorted(SettledRequest.objects.values_list("request_id", "source", "provider_cost_micro")),
    )
