"""A gateway killed with SIGKILL never serves for free: the reaper resolves every hold once.

(a) killed after the vendor call left, while the vendor thinks; (b) killed mid-stream, on a
prepaid budgeted and an invoiced unbudgeted group; (c) killed after the vendor answered and
the client got it, but before the commit landed. The reaper (billing.reaper.
expire_stale_holds, the Celery beat task's body) runs once the holds expire: where the
request's usage row reached the database it charges what the row says; where it did not and
the call was sent, it charges the hold, marked unmeasured; a call never sent costs nothing.
"""

from __future__ import annotations

import signal
import threading
from datetime import timedelta

import httpx
import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from accounts.models import Group
from billing.models import (
    LedgerEntry,
    Receipt,
    Reservation,
    SettledRequest,
    SpendHold,
    Wallet,
)
from billing.reaper import expire_stale_holds
from tests.support.processes import INTERNAL_TOKEN
from tests.support.profiles import install_profiles
from tests.support.services import clear_shared_state, requires_postgres, requires_redis
from tests.support.stacks import Stack
from tests.support.waits import wait_until
from usage.models import UsageLog
from usage.writer import drain_journal_sync

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(120)]
WALLET = 1_000_000
TTL_S = 4


@pytest.fixture
def doomed(transactional_db, spawn_gateway, stub) -> Stack:
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    gateway = spawn_gateway(
        TOLLGATE_RESERVATION_TTL_S=str(TTL_S), TOLLGATE_REQUEST_DEADLINE_S=str(TTL_S)
    )
    return Stack(gateway=gateway, stub=stub)


def post(stack, tenant, *, stream: bool, request_id: str, timeout: float = 30):
    return httpx.post(
        f"{stack.url}/v1/chat/completions",
        timeout=timeout,
        headers={"Authorization": f"Bearer {tenant.api_key}", "x-request-id": request_id},
        json={
            "model": "gpt-4o-mini",
            "stream": stream,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hello there"}],
        },
    )


@pytest.fixture(autouse=True)
def quick_claims(settings):
    """Let this process's journal drain claim a dead gateway's entries after 100 ms."""
    settings.TOLLGATE = {**settings.TOLLGATE, "USAGE_CLAIM_IDLE_MS": 100}


def reap_until_resolved(tenant) -> list[Reservation]:
    def resolved():
        drain_journal_sync(settings.REDIS_URL)
        expire_stale_holds()
        rows = list(Reservation.objects.filter(wallet__account_id=tenant.account_id))
        return rows if rows and all(r.status != "pending" for r in rows) else None

    return wait_until(resolved, timeout_s=30, interval_s=0.5, what="the reaper")


def assert_books_balance(tenant, reservations, *, committed: int) -> None:
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert wallet.reserved_micro == 0
    assert wallet.balance_micro == WALLET - committed
    assert sum(r.committed_micro for r in reservations) == committed
    commits = LedgerEntry.objects.filter(wallet=wallet, kind="commit")
    assert commits.count() == sum(r.status == "committed" for r in reservations)


def worst_case(stack, tenant) -> tuple[int, int]:
    """Return (the plan's budget hold, its platform attempt's wallet reservation)."""
    plan = httpx.post(
        f"{stack.url}/internal/decide",
        json={
            "group": tenant.group_id,
            "request_id": "worst-case",
            "model": "gpt-4o-mini",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hello there"}],
        },
        headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"},
    ).json()
    return plan["budget_estimate_micro"], plan["links"][0]["attempts"][0]["escrow_budget_micro"]


def test_killed_while_the_vendor_thinks_is_charged_at_the_hold_unmeasured(doomed):
    tenant = doomed.tenant(wallet_micro=WALLET)
    _, reserved = worst_case(doomed, tenant)
    doomed.stub.faults({"kind": "hang"})
    worker = threading.Thread(
        target=lambda: _swallow(post, doomed, tenant, stream=False, request_id="crash-a")
    )
    worker.start()
    wait_until(lambda: len(doomed.stub.vendor_calls()) == 1, what="the vendor call")

    doomed.gateway.stop(signal.SIGKILL)
    worker.join(10)

    [reservation] = reap_until_resolved(tenant)
    assert (reservation.status, reservation.unmeasured) == ("committed", True)
    assert reservation.committed_micro == reservation.amount_micro == reserved
    assert_books_balance(tenant, [reservation], committed=reserved)
    [commit] = LedgerEntry.objects.filter(reservation=reservation)
    assert commit.reason == f"unmeasured: request {reservation.request_id}"
    # No budget, so no hold: the reservation's charge reaches the group's counters once.
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        reserved,
        reserved,
        0,
    )
    marker = SettledRequest.objects.get(request_id=reservation.request_id)
    assert (marker.source, marker.provider_cost_micro) == ("reaper", reserved)
    expire_stale_holds(now=timezone.now() + timedelta(seconds=TTL_S * 2))  # changes nothing
    assert Group.objects.get(pk=tenant.group_id).spent_micro == reserved


STREAMS = 8


def test_killed_mid_stream_charges_every_served_request(doomed):
    prepaid = doomed.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    invoiced = doomed.tenant(invoiced=True)
    hold, reserved = worst_case(doomed, prepaid)
    assert worst_case(doomed, invoiced)[0] == hold
    doomed.stub.faults({"kind": "slow", "delay_ms": 500, "times": 2 * STREAMS})
    received: dict[int, list[bytes]] = {n: [] for n in range(2 * STREAMS)}

    def read_stream(n: int, tenant) -> None:
        try:
            with httpx.stream(
                "POST",
                f"{doomed.url}/v1/chat/completions",
                timeout=30,
                headers={"Authorization": f"Bearer {tenant.api_key}"},
                json={
                    "model": "gpt-4o-mini",
                    "stream": True,
                    "max_tokens": 100,
                    "messages": [{"role": "user", "content": "hello there"}],
                },
            ) as r:
                for chunk in r.iter_raw():
                    received[n].append(chunk)
        except httpx.HTTPError:
            pass

    workers = [
        threading.Thread(target=read_stream, args=(n, prepaid if n < STREAMS else invoiced))
        for n in range(2 * STREAMS)
    ]
    for worker in workers:
        worker.start()
    wait_until(
        lambda: all(b"".join(chunks).count(b'"content"') >= 2 for chunks in received.values()),
        what="tokens on every stream",
    )

    doomed.gateway.stop(signal.SIGKILL)
    for worker in workers:
        worker.join(10)

    assert not any(b"[DONE]" in b"".join(chunks) for chunks in received.values())
    assert len(doomed.stub.vendor_calls()) == 2 * STREAMS
    reservations = reap_until_resolved(prepaid)
    expire_stale_holds(now=timezone.now() + timedelta(seconds=TTL_S * 2))
    # No gateway recorded a row: each request's usage row is the reaper's, unmeasured.
    rows = UsageLog.objects.filter(group_id__in=[prepaid.group_id, invoiced.group_id])
    assert sorted(rows.values_list("measurement", "provider_cost_micro", "tokens_out")) == [
        ("unmeasured", hold, 0)
    ] * (2 * STREAMS)
    # Every stream was served, so every one is charged: the wallet at its reservation...
    assert [(r.status, r.unmeasured, r.committed_micro) for r in reservations] == [
        ("committed", True, reserved)
    ] * STREAMS
    assert_books_balance(prepaid, reservations, committed=STREAMS * reserved)
    # ... and each group at its hold, once, with nothing left reserved.
    for tenant in (prepaid, invoiced):
        group = Group.objects.get(pk=tenant.group_id)
        assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
            STREAMS * hold,
            STREAMS * hold,
            0,
        )
        holds = SpendHold.objects.filter(group_id=tenant.group_id)
        assert sorted(holds.values_list("status", flat=True)) == ["charged"] * STREAMS
        markers = SettledRequest.objects.filter(group_id=tenant.group_id, source="reaper")
        assert sorted(markers.values_list("provider_cost_micro", flat=True)) == [hold] * STREAMS
        receipts = Receipt.objects.filter(group_id=tenant.group_id)
        assert (
            sorted(receipts.values_list("kind", "cost_micro")) == [("unmeasured", hold)] * STREAMS
        )
        assert {r.request_id for r in receipts} == set(markers.values_list("request_id", flat=True))


def test_a_hold_whose_call_never_left_is_released_at_zero(transactional_db):
    """The other half of the rule, on the ledger itself: unsent holds cost nothing."""
    from billing.ledger.holds import Hold, mark_hold_sent, take_hold
    from core.sqlexec import run_sync
    from tests.support.tenants import make_tenant

    tenant = make_tenant(wallet_micro=WALLET, budget_micro=WALLET)
    now = timezone.now()
    for request_id, amount_micro in (("never-sent", 500), ("sent", 700)):
        hold = Hold(
            request_id=request_id,
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            key_budgeted=False,
            amount_micro=amount_micro,
        )
        run_sync(take_hold(hold, now=now, ttl_s=TTL_S))
    run_sync(mark_hold_sent("sent"))
    assert Group.objects.get(pk=tenant.group_id).reserved_micro == 1_200

    assert expire_stale_holds(now=now + timedelta(seconds=TTL_S + 1)) == (0, 2)

    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (700, 700, 0)
    assert dict(SpendHold.objects.values_list("request_id", "status")) == {
        "never-sent": "expired",
        "sent": "charged",
    }
    assert list(SettledRequest.objects.values_list("request_id", "provider_cost_micro")) == [
        ("sent", 700)
    ]


def test_killed_after_the_answer_but_before_the_commit_is_charged_from_its_usage_row(doomed):
    tenant = doomed.tenant(wallet_micro=WALLET)
    db = connection.settings_dict
    # Hold the wallet row so the gateway's commit waits: the answer is out, the books are not.
    with psycopg.connect(
        dbname=db["NAME"], user=db.get("USER") or None, host=db.get("HOST") or "127.0.0.1"
    ) as blocker:
        blocker.execute(
            "SELECT 1 FROM billing_wallet WHERE account_id = %s FOR UPDATE", [tenant.account_id]
        )
        # The reservation itself also needs the wallet row: take it, then let it through.
        blocker.rollback()
        worker_result = {}
        worker = threading.Thread(
            target=lambda: worker_result.setdefault(
                "response", post(doomed, tenant, stream=False, request_id="crash-c")
            )
        )
        doomed.stub.faults({"kind": "slow", "delay_ms": 150})  # time to lock before the commit
        worker.start()
        wait_until(
            lambda: Reservation.objects.filter(wallet__account_id=tenant.account_id).exists(),
            what="the reservation",
        )
        blocker.execute(
            "SELECT 1 FROM billing_wallet WHERE account_id = %s FOR UPDATE", [tenant.account_id]
        )
        worker.join(30)
        response = worker_result["response"]
        assert response.status_code == 200  # the client has its whole answer
        # Its row is journaled; storing it (with its money, one transaction) waits on the lock.
        assert (
            Reservation.objects.get(wallet__account_id=tenant.account_id).status == "pending"
        )  # blocked
        doomed.gateway.stop(signal.SIGKILL)
        blocker.rollback()

    [reservation] = reap_until_resolved(tenant)
    row = UsageLog.objects.get(client_request_id="crash-c")
    assert (reservation.status, reservation.committed_micro) == (
        "committed",
        row.provider_cost_micro,
    )
    assert row.provider_cost_micro == 6
    assert_books_balance(tenant, [reservation], committed=6)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (6, 6, 0)
    assert SettledRequest.objects.get(request_id=row.request_id).source == "settle"
    expire_stale_holds()  # a second pass changes nothing
    assert Group.objects.get(pk=tenant.group_id).spent_micro == 6
    assert LedgerEntry.objects.filter(kind="commit", reservation=reservation).count() == 1


def _swallow(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except httpx.HTTPError:
        pass
