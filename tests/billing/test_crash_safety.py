"""A gateway killed with SIGKILL leaves no pending money: the reaper resolves every hold once.

(a) killed after the reservation, while the vendor thinks; (b) killed mid-stream; (c) killed
after the vendor answered and the client got it, but before the commit landed. The reaper
(billing.services.expire_stale_holds, the Celery beat task's body) runs once the holds
expire; where the request's usage row reached the database it charges what the row says.
"""

from __future__ import annotations

import signal
import threading

import httpx
import psycopg
import pytest
from django.conf import settings
from django.db import connection

from accounts.models import Group
from billing.models import LedgerEntry, Reservation, SettledRequest, Wallet
from billing.services import expire_stale_holds
from tests.conftest import (
    Stack,
    clear_shared_state,
    install_profiles,
    requires_postgres,
    requires_redis,
    wait_until,
)
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


def test_killed_after_the_reservation_is_released_by_the_reaper(doomed):
    tenant = doomed.tenant(wallet_micro=WALLET)
    doomed.stub.faults({"kind": "hang"})
    worker = threading.Thread(
        target=lambda: _swallow(post, doomed, tenant, stream=False, request_id="crash-a")
    )
    worker.start()
    wait_until(
        lambda: Reservation.objects.filter(wallet__account_id=tenant.account_id).exists(),
        what="the reservation",
    )

    doomed.gateway.stop(signal.SIGKILL)
    worker.join(10)

    [reservation] = reap_until_resolved(tenant)
    assert reservation.status == "expired"
    assert_books_balance(tenant, [reservation], committed=0)


def test_killed_mid_stream_is_released_by_the_reaper(doomed):
    tenant = doomed.tenant(wallet_micro=WALLET)
    doomed.stub.faults({"kind": "slow", "delay_ms": 500})
    received = []

    def read_stream():
        try:
            with httpx.stream(
                "POST",
                f"{doomed.url}/v1/chat/completions",
                timeout=30,
                headers={"Authorization": f"Bearer {tenant.api_key}", "x-request-id": "crash-b"},
                json={
                    "model": "gpt-4o-mini",
                    "stream": True,
                    "max_tokens": 100,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            ) as r:
                for chunk in r.iter_raw():
                    received.append(chunk)
        except httpx.HTTPError:
            pass

    worker = threading.Thread(target=read_stream)
    worker.start()
    wait_until(lambda: sum(c.count(b'"content"') for c in received) >= 3, what="tokens")

    doomed.gateway.stop(signal.SIGKILL)
    worker.join(10)

    [reservation] = reap_until_resolved(tenant)
    assert reservation.status == "expired"
    assert_books_balance(tenant, [reservation], committed=0)
    assert b"[DONE]" not in b"".join(received)


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
