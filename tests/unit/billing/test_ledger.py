"""The money steps of billing/ledger/, each run through core.sqlexec.run_sync against
the test database in this process: what each one moves, to the micro-USD, and what it
refuses (rolling back everything it did)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import ApiKey, Group
from billing.ledger.charges import Charge, charge, charge_bandwidth
from billing.ledger.holds import CallerBudget, Hold, mark_hold_sent, take_hold
from billing.ledger.reap import reap_hold
from billing.ledger.settle import Settle, settle
from billing.ledger.sql import Refused
from billing.ledger.wallet import cancel_reservation, commit_reservations, credit_wallet
from billing.ledger.wallet import reserve as ledger_reserve
from billing.models import (
    CallerSpend,
    LedgerEntry,
    Reservation,
    SettledRequest,
    SpendHold,
    TagSpend,
    Wallet,
)
from billing.tag_ledger import TagHold
from core.sqlexec import run_sync
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def rid() -> str:
    return f"req-{uuid.uuid4().hex}"


def group(tenant) -> tuple[int, int, int]:
    """Return the group's (spent, reserved, settled) micro-USD."""
    g = Group.objects.get(pk=tenant.group_id)
    return g.spent_micro, g.reserved_micro, g.settled_micro


def key(tenant) -> tuple[int, int]:
    """Return the key's (spent, reserved) micro-USD."""
    k = ApiKey.objects.get(pk=tenant.api_key_id)
    return k.spent_micro, k.reserved_micro


def wallet(tenant) -> tuple[int, int]:
    """Return the wallet's (balance, reserved) micro-USD."""
    w = Wallet.objects.get(account_id=tenant.account_id)
    return w.balance_micro, w.reserved_micro


def hold(tenant, amount: int, *, request_id=None, key_budgeted=False, caller=None, tags=(), **kw):
    request_id = request_id or rid()
    step = Hold(request_id, tenant.group_id, tenant.api_key_id, key_budgeted, amount, caller, tags)
    run_sync(take_hold(step, now=NOW, ttl_s=60, **kw))
    return request_id


def reserve(tenant, amount: int, *, request_id=None) -> int:
    return run_sync(
        ledger_reserve(
            account_id=tenant.account_id,
            request_id=request_id or rid(),
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            attempt_no=1,
            amount_micro=amount,
            now=NOW,
            ttl_s=60,
        )
    )


# ---------------------------------------------------------------- budget holds


def test_a_hold_reserves_its_amount_on_the_group_and_a_budgeted_key():
    tenant = make_tenant(budget_micro=1_000)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=500)

    request_id = hold(tenant, 300, key_budgeted=True)

    assert (group(tenant), key(tenant)) == ((0, 300, 0), (0, 300))
    row = SpendHold.objects.get(request_id=request_id)
    assert (row.amount_micro, row.status, row.call_sent, row.api_key_id) == (
        300,
        "held",
        False,
        tenant.api_key_id,
    )
    assert row.expires_at - row.created_at == timedelta(seconds=60)


def test_a_hold_may_fill_the_budget_exactly_then_zero_credit_refuses_even_a_zero_hold():
    tenant = make_tenant(budget_micro=1_000)
    hold(tenant, 1_000)

    with pytest.raises(Refused, match="group budget"):
        hold(tenant, 0)

    assert group(tenant) == (0, 1_000, 0)
    assert SpendHold.objects.filter(group_id=tenant.group_id).count() == 1


def test_a_hold_past_the_budget_is_refused_and_moves_nothing():
    tenant = make_tenant(budget_micro=1_000)
    Group.objects.filter(pk=tenant.group_id).update(spent_micro=600)

    with pytest.raises(Refused, match="group budget"):
        hold(tenant, 401)

    assert group(tenant) == (600, 0, 0)
    assert not SpendHold.objects.filter(group_id=tenant.group_id).exists()


def test_a_key_budget_refusal_rolls_back_the_groups_part_of_the_hold():
    tenant = make_tenant()  # the group has no budget
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=100)

    with pytest.raises(Refused, match="key budget"):
        hold(tenant, 101, key_budgeted=True)

    assert (group(tenant), key(tenant)) == ((0, 0, 0), (0, 0))


def test_a_caller_hold_opens_the_callers_spend_row_and_refuses_past_its_budget():
    tenant = make_tenant(budget_micro=10_000)
    caller = CallerBudget(tenant.group_id, "c_label", "2026-12", 500)
    hold(tenant, 400, caller=caller)

    with pytest.raises(Refused, match="caller budget"):
        hold(tenant, 101, caller=caller)

    spend = CallerSpend.objects.get(group_id=tenant.group_id, caller_label="c_label")
    assert (spend.period, spend.spent_micro, spend.reserved_micro) == ("2026-12", 0, 400)
    assert group(tenant) == (0, 400, 0)


# ---------------------------------------------------------------- wallet reservations


def test_a_reservation_holds_the_wallet_and_refuses_what_the_balance_cannot_cover():
    tenant = make_tenant(wallet_micro=1_000)
    first = reserve(tenant, 600)

    with pytest.raises(Refused, match="wallet"):
        reserve(tenant, 401)
    reserve(tenant, 400)  # exactly what is left

    assert wallet(tenant) == (1_000, 1_000)
    row = Reservation.objects.get(pk=first)
    assert (row.amount_micro, row.status, row.call_sent) == (600, "pending", True)


def test_a_commit_debits_up_to_the_hold_collects_the_excess_after_and_happens_once():
    tenant = make_tenant(wallet_micro=1_000)
    under, over = reserve(tenant, 300), reserve(tenant, 200)

    request_of = dict(Reservation.objects.values_list("pk", "request_id"))
    costs = {under: (request_of[under], 250), over: (request_of[over], 260)}
    committed = run_sync(commit_reservations(costs, now=NOW))
    again = run_sync(commit_reservations(costs, now=NOW))

    assert ([c.reservation_id for c in committed], again) == (sorted([under, over]), [])
    assert [(c.taken_micro, c.uncollected_micro) for c in committed] == [(250, 0), (260, 0)]
    assert wallet(tenant) == (490, 0)  # 1000 - 250 - 200, then the 60 over the hold
    rows = {
        r.pk: (r.status, r.committed_micro, r.excess_micro, r.collected_micro)
        for r in Reservation.objects.all()
    }
    assert (rows[under], rows[over]) == (("committed", 250, 0, 0), ("committed", 200, 60, 60))
    entries = LedgerEntry.objects.order_by("id").exclude(kind="opening")
    assert [(e.kind, e.amount_micro, e.balance_after_micro) for e in entries] == [
        ("commit", -250, 750),
        ("commit", -200, 550),
        ("excess", -60, 490),
    ]
    assert [c.entries for c in committed] == [(entries[0].id,), (entries[1].id, entries[2].id)]


def test_an_excess_is_collected_only_from_what_the_wallet_has_available():
    tenant = make_tenant(wallet_micro=1_000)
    served, other = reserve(tenant, 500), reserve(tenant, 400)  # the other stays held

    request_id = Reservation.objects.get(pk=served).request_id
    [done] = run_sync(commit_reservations({served: (request_id, 800)}, now=NOW))

    # 1000 - 500 leaves 500, of which 400 is held: 100 of the 300 excess can be taken.
    assert (done.debited_micro, done.collected_micro, done.uncollected_micro) == (500, 100, 200)
    assert wallet(tenant) == (400, 400)
    row = Reservation.objects.get(pk=served)
    assert (row.excess_micro, row.collected_micro, row.uncollected_micro) == (300, 100, 200)
    assert Reservation.objects.get(pk=other).status == "pending"


def test_a_cancelled_reservation_is_released_at_zero_once():
    tenant = make_tenant(wallet_micro=1_000)
    reservation = reserve(tenant, 300)

    first = run_sync(cancel_reservation(reservation, now=NOW))
    second = run_sync(cancel_reservation(reservation, now=NOW))

    assert (first, second) == (True, False)
    assert wallet(tenant) == (1_000, 0)
    assert Reservation.objects.get(pk=reservation).status == "cancelled"


def test_a_wallet_correction_below_what_it_holds_is_refused():
    tenant = make_tenant(wallet_micro=1_000)
    wallet_id = Wallet.objects.get(account_id=tenant.account_id).pk
    reserve(tenant, 800)

    def correct(amount: int) -> int:
        return run_sync(
            credit_wallet(wallet_id, amount_micro=amount, kind="adjustment", reason="fix", now=NOW)
        )

    with pytest.raises(Refused):
        correct(-201)
    entry = LedgerEntry.objects.get(pk=correct(-200))

    assert wallet(tenant) == (800, 800)
    assert (entry.kind, entry.amount_micro, entry.balance_after_micro) == ("adjustment", -200, 800)


# ---------------------------------------------------------------- charges


def test_a_request_is_charged_once_whoever_charges_it_first():
    tenant = make_tenant()
    request_id = rid()
    owed = Charge(request_id, tenant.group_id, tenant.api_key_id, None, 100, 7)

    first = run_sync(charge([owed, owed], source="settle", now=NOW))
    second = run_sync(charge([owed], source="reaper", now=NOW))

    assert (first, second) == ({request_id}, set())
    assert (group(tenant), key(tenant)) == ((107, 0, 100), (107, 0))  # bandwidth is not settled
    marker = SettledRequest.objects.get(request_id=request_id)
    assert (marker.source, marker.provider_cost_micro, marker.bandwidth_micro) == ("settle", 100, 7)


def test_a_bandwidth_correction_moves_group_and_key_by_the_difference():
    tenant = make_tenant()
    request_id = rid()
    owed = Charge(request_id, tenant.group_id, tenant.api_key_id, None, 100, 7)
    run_sync(charge([owed], source="settle", now=NOW))

    moved = [run_sync(charge_bandwidth(request_id, bandwidth_micro=b)) for b in (10, 10, 4)]

    assert moved == [3, 0, -6]
    assert (group(tenant), key(tenant)) == ((104, 0, 100), (104, 0))


def test_a_bandwidth_correction_moves_the_callers_and_the_tags_spend_too():
    tenant = make_tenant()
    caller = CallerBudget(tenant.group_id, "c_label", "2026-12", 5_000)
    tags = (
        TagHold("customer-42", "2026-12", tenant.account_id, 5_000),
        TagHold("team-a", "all", tenant.account_id, 5_000),
    )
    request_id = hold(tenant, 500, caller=caller, tags=tags)
    settled = Settle(request_id, tenant.group_id, tenant.api_key_id, 100, 7)
    run_sync(settle([settled], now=NOW))

    assert run_sync(charge_bandwidth(request_id, bandwidth_micro=10)) == 3

    caller_spend = CallerSpend.objects.get(group_id=tenant.group_id, caller_label="c_label")
    assert (caller_spend.spent_micro, caller_spend.reserved_micro) == (110, 0)
    assert sorted(TagSpend.objects.values_list("tag", "spent_micro", "reserved_micro")) == [
        ("customer-42", 110, 0),
        ("team-a", 110, 0),
    ]
    assert (group(tenant)[0], key(tenant)[0]) == (110, 110)


def test_a_correction_of_a_reconciliation_charge_moves_only_what_it_charged():
    tenant = make_tenant()
    caller = CallerBudget(tenant.group_id, "c_label", "2026-12", 5_000)
    tags = (TagHold("team-a", "all", tenant.account_id, 5_000),)
    request_id = hold(tenant, 500, caller=caller, tags=tags)
    # Reconciliation charges a stored row's group and key only, never its caller or tags.
    owed = Charge(request_id, tenant.group_id, tenant.api_key_id, None, 100, 7)
    run_sync(charge([owed], source="reconcile", now=NOW))

    assert run_sync(charge_bandwidth(request_id, bandwidth_micro=2)) == -5

    caller_spend = CallerSpend.objects.get(group_id=tenant.group_id, caller_label="c_label")
    assert caller_spend.spent_micro == 0
    assert list(TagSpend.objects.values_list("tag", "spent_micro")) == [("team-a", 0)]
    assert (group(tenant)[0], key(tenant)[0]) == (102, 102)


def test_settle_commits_the_reservation_releases_the_hold_and_charges_cost_and_bandwidth():
    tenant = make_tenant(wallet_micro=1_000, budget_micro=10_000)
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=5_000)
    request_id = hold(tenant, 500, key_budgeted=True)
    reservation = reserve(tenant, 300, request_id=request_id)

    run_sync(
        settle(
            [Settle(request_id, tenant.group_id, tenant.api_key_id, 120, 5, reservation)],
            now=NOW,
        )
    )

    assert wallet(tenant) == (880, 0)
    assert (group(tenant), key(tenant)) == ((125, 0, 120), (125, 0))
    assert SpendHold.objects.get(request_id=request_id).status == "settled"
    assert Reservation.objects.get(pk=reservation).committed_micro == 120


def test_reaping_charges_a_sent_hold_at_its_amount_and_releases_an_unsent_one_at_zero():
    tenant = make_tenant(budget_micro=10_000)
    sent = hold(tenant, 300)
    run_sync(mark_hold_sent(sent))
    unsent = hold(tenant, 200)

    reaped = [run_sync(reap_hold(r, now=NOW)) for r in (sent, unsent, sent)]

    assert reaped == [True, True, False]  # each hold is resolved once
    assert group(tenant) == (300, 0, 300)
    assert {h.request_id: h.status for h in SpendHold.objects.all()} == {
        sent: "charged",
        unsent: "expired",
    }
    assert SettledRequest.objects.get(request_id=sent).source == "reaper"
    assert not SettledRequest.objects.filter(request_id=unsent).exists()
