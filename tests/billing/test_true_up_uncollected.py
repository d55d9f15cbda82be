"""A late row that measured more than the hold the reaper charged, on a wallet that cannot
cover the difference: the true-up takes what the wallet has and states the rest uncollected.

A request holds 1,000 on its group, its key and its wallet (which has 1,300) and its call is
sent; its gateway dies before storing the row. The reaper charges it at the hold
(unmeasured). The row then arrives late, measuring 2,000: 1,000 above the hold, of which the
wallet covers only the 300 it has left. The true-up (billing/ledger/settle.py `true_up`,
`collect_excess`) takes those 300 as one `excess` ledger entry and leaves 700 uncollected:
the `trueup` receipt, the usage event, the settled marker and the group's and key's counters
each state the 300 taken and the 700 remainder on its own, never as cost; the store still
verifies against its ledger.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import orjson
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiKey, Group
from billing.ledger.holds import Hold, take_hold
from billing.ledger.wallet import reserve
from billing.models import LedgerEntry, Receipt, Reservation, SettledRequest, Wallet
from billing.reaper import expire_stale_holds
from core.sqlexec import run_sync
from tests.billing.test_verify_receipts import verify
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from tests.support.usage import attempt, journal_row, store
from usage.models import UsageEvent
from usage.services import event_schema_validator, usage_events_flush, window_floor

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]
HOLD = 1_000
FUNDS = HOLD + 300  # the hold, and 300 of what the row will measure above it
MEASURED = HOLD + 1_000
TTL_S = 4
WINDOW_S = 60


@pytest.fixture(autouse=True)
def events_every_minute(settings):
    settings.TOLLGATE = {**settings.TOLLGATE, "USAGE_WINDOW_S": WINDOW_S, "USAGE_GRACE_S": 0}


def test_a_late_row_above_the_hold_takes_what_the_wallet_has_and_states_the_rest_uncollected():
    tenant = make_tenant(wallet_micro=FUNDS)
    # A key with a budget: the hold reserves on it too (a key without one is only named on
    # the hold); either way the reaper charges the key with the group.
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=1_000_000)
    request_id = f"req-{uuid.uuid4().hex}"
    now = timezone.now()
    # The request path: a budget hold and a wallet reservation, the vendor call sent.
    run_sync(
        take_hold(
            Hold(request_id, tenant.group_id, tenant.api_key_id, True, HOLD),
            now=now,
            ttl_s=TTL_S,
            call_sent=True,
        )
    )
    reservation_id = run_sync(
        reserve(
            account_id=tenant.account_id,
            request_id=request_id,
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            attempt_no=1,
            amount_micro=HOLD,
            now=now,
            ttl_s=TTL_S,
        )
    )

    # The gateway died: the reaper charges the request at its hold (a window ahead, so its
    # charge and the true-up fall in different usage windows).
    reaped_at = now + timedelta(seconds=WINDOW_S)
    assert expire_stale_holds(now=reaped_at) == (1, 1)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (FUNDS - HOLD, 0)

    # The row arrives late, measuring 1,000 above the hold; the wallet has 300 left.
    store(
        journal_row(
            account_id=tenant.account_id,
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            request_id=request_id,
            created_at=now,
            provider_cost_micro=MEASURED,
            reservation_id=reservation_id,
            attempts=[attempt(reservation_id=reservation_id)],
        )
    )

    taken, uncollected = FUNDS - HOLD, MEASURED - FUNDS
    assert (taken, uncollected) == (300, 700)
    # The reservation: committed at the hold, the excess 1,000: 300 collected, 700 not.
    reservation = Reservation.objects.get(pk=reservation_id)
    assert (
        reservation.committed_micro,
        reservation.excess_micro,
        reservation.collected_micro,
        reservation.uncollected_micro,
        reservation.unmeasured,
    ) == (HOLD, MEASURED - HOLD, taken, uncollected, False)
    # The ledger: the opening, the reaper's commit at the hold, the true-up's excess taken to
    # zero and no further (nothing given back: the row measured more than the hold).
    entries = list(
        LedgerEntry.objects.filter(wallet__account_id=tenant.account_id)
        .order_by("id")
        .values_list("id", "kind", "amount_micro", "balance_after_micro", "request_id")
    )
    [opening, commit, excess] = entries
    assert opening[1:4] == ("opening", FUNDS, FUNDS)
    assert commit[1:] == ("commit", -HOLD, FUNDS - HOLD, request_id)
    assert excess[1:] == ("excess", -taken, 0, request_id)
    wallet.refresh_from_db()
    assert (wallet.balance_micro, wallet.reserved_micro) == (0, 0)

    # The receipts: the reaper's at the hold, then the true-up's 300 taken, 700 stated apart.
    receipts = list(Receipt.objects.filter(account_id=tenant.account_id).order_by("seq"))
    assert [(r.kind, r.request_id, r.cost_micro) for r in receipts] == [
        ("unmeasured", request_id, HOLD),
        ("trueup", request_id, taken),
    ]
    first, trued = (orjson.loads(r.body) for r in receipts)
    assert first["amounts"]["uncollected_micro"] == 0
    assert first["wallet"] == {"ledger_entries": [commit[0]], "taken_micro": HOLD}
    assert trued["amounts"] == {
        "provider_cost_micro": taken,
        "bandwidth_micro": 0,
        "total_micro": taken,
        "uncollected_micro": uncollected,
    }
    assert trued["wallet"] == {"ledger_entries": [excess[0]], "taken_micro": taken}
    assert trued["measured"]["provider_cost_micro"] == MEASURED
    assert trued["trued_up"] == {"charged_at_hold_micro": HOLD, "wallet_returned_micro": 0}
    assert trued["running"] == {
        "provider_cost_micro": HOLD + taken,
        "bandwidth_micro": 0,
        "uncollected_micro": uncollected,
        "wallet_taken_micro": HOLD + taken,
    }

    # The settled marker and the counters: what was taken, the remainder on its own.
    marker = SettledRequest.objects.get(request_id=request_id)
    assert (marker.source, marker.provider_cost_micro) == ("trueup", HOLD + taken)
    group = Group.objects.get(pk=tenant.group_id)
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (group.settled_micro, group.spent_micro, group.reserved_micro) == (
        HOLD + taken,
        HOLD + taken,
        0,
    )
    assert (group.uncollected_micro, key.spent_micro, key.reserved_micro) == (
        uncollected,
        HOLD + taken,
        0,
    )
    assert key.uncollected_micro == uncollected
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    shown = api.get(f"/api/groups/{tenant.group_id}").json()
    assert (shown["settled_micro"], shown["uncollected_micro"]) == (HOLD + taken, uncollected)
    shown = api.get(f"/api/receipts/{request_id}").json()["results"]
    assert [(r["kind"], r["document"]["amounts"]["uncollected_micro"]) for r in shown] == [
        ("unmeasured", 0),
        ("trueup", uncollected),
    ]

    # The usage events: the hold in the reaper's window; in the late row's, the 300 taken
    # as cost and the 700 as its own unit. Their cost sums to the group's settled cost.
    usage_events_flush(now=reaped_at + timedelta(seconds=3 * WINDOW_S))
    events = {
        e.window_start: e.payload
        for e in UsageEvent.objects.filter(group_id=tenant.group_id).order_by("window_start")
    }
    for payload in events.values():
        event_schema_validator().validate(payload)
    late = window_floor(receipts[1].settled_at, window_s=WINDOW_S)
    reaped = window_floor(reaped_at, window_s=WINDOW_S)
    assert late != reaped
    assert {
        w: (
            e["requests"],
            e["units"]["provider_cost_micro_usd"],
            e["units"]["uncollected_micro_usd"],
        )
        for w, e in events.items()
    } == {reaped: (1, HOLD, 0), late: (1, taken, uncollected)}

    # The store verifies: chain, signatures, and every receipt against its wallet's ledger.
    ok, lines = verify("--account", str(tenant.account_id))
    assert ok, lines
