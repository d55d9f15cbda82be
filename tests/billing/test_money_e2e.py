"""Money on the request path: escrow, budgets, billing modes, exact to the micro-USD."""

from __future__ import annotations

import httpx
import openai
import pytest

from accounts.models import Account, ApiKey, Group
from accounts.services import account_billing_update
from billing.models import LedgerEntry, Reservation, SpendHold, Wallet
from tests.byok.helpers import team_keys
from tests.support.processes import INTERNAL_TOKEN
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

HELLO = [{"role": "user", "content": "hello there"}]  # 2 words: the stub bills 2 tokens in
COST = 6  # 2 x 0.15 + 8 x 0.60 = 5.1 micro-USD, rounded up


def worst_case(stack, tenant, max_tokens: int | None = None) -> int:
    body = {
        "group": tenant.group_id,
        "request_id": "worst-case",
        "model": "gpt-4o-mini",
        "messages": HELLO,
    }
    if max_tokens:
        body["max_tokens"] = max_tokens
    plan = httpx.post(
        f"{stack.url}/internal/decide",
        json=body,
        headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"},
    ).json()
    return plan["links"][0]["attempts"][0]["escrow_budget_micro"]


def ask(stack, tenant, **kwargs):
    """Ask once and wait until the gateway settled it (settlement follows the answer)."""
    try:
        return stack.openai(tenant).chat.completions.create(
            model="gpt-4o-mini", messages=HELLO, **kwargs
        )
    finally:
        settled(tenant)


def settled(tenant) -> None:
    wait_until(
        lambda: (
            not Reservation.objects.filter(
                wallet__account_id=tenant.account_id, status="pending"
            ).exists()
            and not SpendHold.objects.filter(group_id=tenant.group_id, status="held").exists()
            and usage_rows(group_id=tenant.group_id)
        ),
        what="the request to settle",
    )


def test_a_prepaid_platform_request_reserves_then_commits_its_measured_cost(stack):
    tenant = stack.tenant(wallet_micro=1_000)
    hold = worst_case(stack, tenant, max_tokens=100)

    ask(stack, tenant, max_tokens=100)

    [reservation] = Reservation.objects.filter(wallet__account_id=tenant.account_id)
    assert (
        reservation.status,
        reservation.amount_micro,
        reservation.committed_micro,
        reservation.excess_micro,
    ) == ("committed", hold, COST, 0)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (1_000 - COST, 0)
    assert list(
        LedgerEntry.objects.filter(wallet=wallet)
        .order_by("id")
        .values_list("kind", "amount_micro", "balance_after_micro")
    ) == [("opening", 1_000, 1_000), ("commit", -COST, 1_000 - COST)]
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (COST, COST, 0)


def test_a_wallet_that_cannot_cover_the_hold_is_lm_4002_before_any_call(stack):
    tenant = stack.tenant(wallet_micro=10)  # far below the worst case of a 4096-token answer
    hold = worst_case(stack, tenant)

    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant)

    assert refused.value.status_code == 402 and refused.value.body["code"] == "LM-4002"
    # The message says why and what to do about it.
    dollars = f"{hold // 1_000_000}.{hold % 1_000_000:06d}".rstrip("0")
    assert refused.value.body["message"] == (
        "The account's wallet cannot cover this request: it has $0.00001 available and"
        f" this request may cost up to ${dollars} (held before the call; what it does not use"
        " is released). Ask this gateway's operator to top up the wallet. The balance is at"
        f" GET /api/accounts/{tenant.account_id}/wallet (tenant API token) and on the"
        " dashboard's Wallet page."
    )
    assert stack.stub.vendor_calls() == []
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (10, 0)
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.error_code, row.upstream_sent, row.bandwidth_charge_micro) == ("LM-4002", False, 0)


def test_an_invoiced_account_skips_the_wallet_and_is_bounded_by_its_budget(stack):
    tenant = stack.tenant(wallet_micro=0, invoiced=True)
    hold = worst_case(stack, tenant, max_tokens=100)
    Group.objects.filter(pk=tenant.group_id).update(budget_max_micro=hold + COST - 1)
    stack.gateway.reload()

    ask(stack, tenant, max_tokens=100)  # holds `hold`, spends COST
    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant, max_tokens=100)  # COST + hold would pass the budget by 1
    assert refused.value.status_code == 402 and refused.value.body["code"] == "LM-4001"

    assert Reservation.objects.count() == 0
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (COST, COST, 0)
    assert len(stack.stub.vendor_calls()) == 1


def test_zero_credit_is_a_hard_stop_even_for_team_key_traffic(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a"])
    Group.objects.filter(pk=tenant.group_id).update(budget_max_micro=0)
    stack.gateway.reload()

    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant)

    assert refused.value.body["code"] == "LM-4001"
    assert stack.stub.vendor_calls() == []


def test_team_traffic_spends_nothing_but_its_bandwidth(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a"])
    Group.objects.filter(pk=tenant.group_id).update(
        budget_max_micro=1_000_000, bandwidth_micro_usd_per_gb=1_000_000_000
    )  # 1 micro / byte
    stack.gateway.reload()

    ask(stack, tenant)

    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert row.bandwidth_charge_micro == row.bytes_in + row.bytes_out > 0
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        row.bandwidth_charge_micro,
        0,
        0,
    )
    assert ApiKey.objects.get(pk=tenant.api_key_id).spent_micro == row.bandwidth_charge_micro
    assert Reservation.objects.count() == 0
    assert SpendHold.objects.get(request_id=row.request_id).status == "settled"


def test_a_key_budget_refuses_while_the_group_has_room(stack):
    tenant = stack.tenant()
    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=0)
    stack.gateway.reload()

    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant)

    assert refused.value.body["code"] == "LM-4001"
    assert "key budget" in refused.value.body["message"]
    assert Group.objects.get(pk=tenant.group_id).reserved_micro == 0  # rolled back whole


def test_billing_settings_push_floor_of_price_over_markup_to_every_group(stack):
    tenant = stack.tenant()
    account = Account.objects.get(pk=tenant.account_id)
    Group.objects.create(account=account, name="second")

    rate = account_billing_update(account=account, price_micro_per_gb=100_001, markup_bp=30_000)

    assert rate == 33_333
    assert set(
        Group.objects.filter(account=account).values_list("bandwidth_micro_usd_per_gb", flat=True)
    ) == {33_333}
    account_billing_update(account=account, price_micro_per_gb=0, markup_bp=10_000)
    stack.gateway.reload()
    ask(stack, tenant)
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert row.bandwidth_charge_micro == 0  # rate 0 disables the charge


def test_a_failed_platform_attempt_cancels_its_reservation_and_the_next_link_holds_anew(stack):
    tenant = stack.tenant(wallet_micro=1_000)
    stack.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}})

    answer = stack.openai(tenant).chat.completions.create(
        model="gpt-4o-mini,claude-3-5-haiku", messages=HELLO, max_tokens=100
    )
    settled(tenant)

    assert answer.choices[0].message.content.endswith("claude-3-5-haiku-latest reply ok")
    reservations = list(
        Reservation.objects.filter(wallet__account_id=tenant.account_id).order_by("id")
    )
    assert [(r.status, r.committed_micro) for r in reservations] == [
        ("cancelled", 0),
        ("committed", 34),
    ]  # 2 x 0.8 + 8 x 4.0 = 33.6 -> 34
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (1_000 - 34, 0)
    assert LedgerEntry.objects.filter(wallet=wallet, kind="commit").count() == 1


# A prepaid request under a group budget takes its hold and its first platform attempt's
# reservation in one statement (billing.ledger.fused.HOLD_AND_RESERVE_STATEMENT): one commit, one
# instant for both rows. Whichever of the two refuses, nothing of the other is left behind.


def test_the_hold_and_the_first_reservation_are_taken_together_and_settle_exactly(stack):
    tenant = stack.tenant(wallet_micro=1_000, budget_micro=1_000_000)
    hold = worst_case(stack, tenant, max_tokens=100)

    ask(stack, tenant, max_tokens=100)

    [held] = SpendHold.objects.filter(group_id=tenant.group_id)
    [reservation] = Reservation.objects.filter(wallet__account_id=tenant.account_id)
    assert (held.created_at, held.expires_at) == (reservation.created_at, reservation.expires_at)
    assert (held.status, held.amount_micro) == ("settled", hold)
    assert (
        reservation.attempt_no,
        reservation.call_sent,
        reservation.status,
        reservation.amount_micro,
        reservation.committed_micro,
    ) == (1, True, "committed", hold, COST)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (1_000 - COST, 0)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (COST, COST, 0)
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.reservation_id, row.provider_cost_micro) == (reservation.pk, COST)


def test_a_group_budget_refusal_takes_nothing_from_a_wallet_that_could_pay(stack):
    tenant = stack.tenant(wallet_micro=1_000_000)
    hold = worst_case(stack, tenant, max_tokens=100)
    Group.objects.filter(pk=tenant.group_id).update(budget_max_micro=hold - 1)
    stack.gateway.reload()

    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant, max_tokens=100)

    assert refused.value.status_code == 402 and refused.value.body["code"] == "LM-4001"
    assert stack.stub.vendor_calls() == []
    assert not Reservation.objects.filter(wallet__account_id=tenant.account_id).exists()
    assert not SpendHold.objects.filter(group_id=tenant.group_id).exists()
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (1_000_000, 0)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.reserved_micro) == (0, 0)


def test_a_wallet_refusal_under_a_group_budget_is_lm_4002_and_its_hold_is_released(stack):
    tenant = stack.tenant(wallet_micro=10, budget_micro=1_000_000)

    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant)

    assert refused.value.status_code == 402 and refused.value.body["code"] == "LM-4002"
    assert stack.stub.vendor_calls() == []
    assert not Reservation.objects.filter(wallet__account_id=tenant.account_id).exists()
    [held] = SpendHold.objects.filter(group_id=tenant.group_id)
    assert (held.status, held.call_sent) == ("settled", False)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (10, 0)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.reserved_micro) == (0, 0)
