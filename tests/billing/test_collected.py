"""Nothing is stated that was not collected: what a wallet paid is what its receipt, the
group's counters and the ledger say, to the micro-USD.

A real gateway, the stub vendor and the official openai SDK. `n=128` on a reasoning model
with `max_completion_tokens=1` is held for all 128 answers (reasoning spends from the cap,
as OpenAI counts it), so the measured cost fits the hold. A vendor that ignores the cap
(the stub's `ignore_cap` fault) bills past the hold: the excess is collected after the
commit as one `excess` ledger entry, or, where the wallet cannot cover it, taken as far as
it can and the rest stated as uncollected, never charged: on the receipt, the usage event
and the group's and key's counters, each as its own field.
"""

from __future__ import annotations

import orjson
import pytest
from rest_framework.test import APIClient

from accounts.models import ApiKey, Group
from billing.models import LedgerEntry, Receipt, Reservation, Wallet
from core.money import TokenPrices
from tests.billing.test_money_e2e import settled
from tests.support.profiles import api_profiles
from tests.support.stacks import own_stack
from tests.support.usage import after_windows, usage_rows
from usage.models import UsageEvent
from usage.services import event_schema_validator, usage_events_flush

pytestmark = pytest.mark.timeout(120)
HELLO = [{"role": "user", "content": "hello there"}]  # 2 prompt tokens on the stub
O4_MINI = {"input_micro_per_mtok": 1_100_000, "output_micro_per_mtok": 4_400_000}
CHOICES = 128


@pytest.fixture
def reasoning_stack(transactional_db, shared_gateway, stub):
    return own_stack(shared_gateway, stub, api_profiles(stub.url))


def ask_128(stack, tenant):
    answer = stack.openai(tenant).chat.completions.create(
        model="o4-mini", messages=HELLO, n=CHOICES, max_completion_tokens=1
    )
    settled(tenant)
    return answer


def money_of(tenant) -> dict:
    """Everything that states the request's money, read back from the store."""
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    [reservation] = Reservation.objects.filter(wallet__account_id=tenant.account_id)
    [receipt] = Receipt.objects.filter(account_id=tenant.account_id)
    body = orjson.loads(receipt.body)
    entries = list(
        LedgerEntry.objects.filter(wallet__account_id=tenant.account_id)
        .order_by("id")
        .values_list("id", "kind", "amount_micro", "balance_after_micro")
    )
    return {
        "row": row,
        "reservation": reservation,
        "receipt": body,
        "entries": entries,
        "wallet": Wallet.objects.get(account_id=tenant.account_id),
        "group": Group.objects.get(pk=tenant.group_id),
        "key": ApiKey.objects.get(pk=tenant.api_key_id),
    }


def test_n_128_on_a_reasoning_model_is_held_for_every_answer_and_debited_exactly(
    reasoning_stack,
):
    stack = reasoning_stack
    tenant = stack.tenant(wallet_micro=1_000_000)

    answer = ask_128(stack, tenant)

    # The vendor was sent the cap in its own field, for all 128 answers.
    [call] = stack.stub.vendor_calls()
    assert (call["body"]["max_completion_tokens"], call["body"]["n"]) == (1, CHOICES)
    assert "max_tokens" not in call["body"]
    # Each answer's one token was reasoning: 128 output tokens in all, within the hold.
    assert (answer.usage.completion_tokens, answer.usage.prompt_tokens) == (CHOICES, 2)
    assert answer.usage.completion_tokens_details.reasoning_tokens == CHOICES
    cost = TokenPrices.configured(**O4_MINI).cost_micro(tokens_in=2, tokens_out=CHOICES)
    assert cost == 566  # 2 x 1.1 + 128 x 4.4 = 565.4, rounded up
    money = money_of(tenant)
    r = money["reservation"]
    assert (r.committed_micro, r.excess_micro, r.collected_micro, r.uncollected_micro) == (
        cost,
        0,
        0,
        0,
    )
    assert r.amount_micro >= cost
    [opening, commit] = money["entries"]
    assert commit[1:] == ("commit", -cost, 1_000_000 - cost)
    assert money["wallet"].balance_micro == 1_000_000 - cost
    assert money["receipt"]["amounts"]["provider_cost_micro"] == cost
    assert money["receipt"]["amounts"]["uncollected_micro"] == 0
    assert money["receipt"]["wallet"] == {"ledger_entries": [commit[0]], "taken_micro": cost}
    assert (money["group"].settled_micro, money["group"].spent_micro) == (cost, cost)
    assert money["key"].spent_micro == cost
    assert money["row"].provider_cost_micro == cost


def test_a_vendor_that_ignores_the_cap_is_collected_in_full_after_the_commit(reasoning_stack):
    stack = reasoning_stack
    tenant = stack.tenant(wallet_micro=1_000_000)
    stack.stub.faults({"kind": "ignore_cap", "match": {"model": "o4-mini"}})

    answer = ask_128(stack, tenant)

    # Each answer: 16 reasoning tokens and the 8 words, though the cap said 1.
    assert answer.usage.completion_tokens == CHOICES * 24
    cost = TokenPrices.configured(**O4_MINI).cost_micro(tokens_in=2, tokens_out=CHOICES * 24)
    assert cost == 13_519  # 2 x 1.1 + 3,072 x 4.4 = 13,519.0
    money = money_of(tenant)
    r = money["reservation"]
    hold = r.amount_micro
    assert hold < cost
    assert (r.committed_micro, r.excess_micro, r.collected_micro, r.uncollected_micro) == (
        hold,
        cost - hold,
        cost - hold,
        0,
    )
    [_, commit, excess] = money["entries"]
    assert commit[1:] == ("commit", -hold, 1_000_000 - hold)
    assert excess[1:] == ("excess", -(cost - hold), 1_000_000 - cost)
    # Wallet debit == receipt's taken amount == counters == the measured cost.
    assert money["wallet"].balance_micro == 1_000_000 - cost
    assert money["wallet"].reserved_micro == 0
    assert money["receipt"]["wallet"] == {
        "ledger_entries": [commit[0], excess[0]],
        "taken_micro": cost,
    }
    assert money["receipt"]["amounts"]["provider_cost_micro"] == cost
    assert money["receipt"]["amounts"]["uncollected_micro"] == 0
    assert (money["group"].settled_micro, money["group"].spent_micro) == (cost, cost)
    assert money["key"].spent_micro == cost
    assert (money["group"].uncollected_micro, money["key"].uncollected_micro) == (0, 0)
    assert money["row"].provider_cost_micro == cost


def test_an_excess_the_wallet_cannot_cover_is_taken_to_zero_and_stated_uncollected(
    reasoning_stack,
):
    stack = reasoning_stack
    probe = stack.tenant(wallet_micro=1_000_000)
    ask_128(stack, probe)  # learns the hold: the same request holds the same
    hold = Reservation.objects.get(wallet__account_id=probe.account_id).amount_micro
    funds = hold + 1_000  # covers the hold and 1,000 of the excess
    tenant = stack.tenant(wallet_micro=funds)
    stack.stub.faults({"kind": "ignore_cap", "match": {"model": "o4-mini"}})

    ask_128(stack, tenant)

    cost = 13_519
    taken, uncollected = funds, cost - funds
    money = money_of(tenant)
    r = money["reservation"]
    assert (r.amount_micro, r.committed_micro, r.excess_micro) == (hold, hold, cost - hold)
    assert (r.collected_micro, r.uncollected_micro) == (1_000, uncollected)
    [_, commit, excess] = money["entries"]
    assert commit[1:] == ("commit", -hold, 1_000)
    assert excess[1:] == ("excess", -1_000, 0)
    # The wallet went to 0 and no further; everything states exactly what it paid.
    assert (money["wallet"].balance_micro, money["wallet"].reserved_micro) == (0, 0)
    assert money["receipt"]["wallet"] == {
        "ledger_entries": [commit[0], excess[0]],
        "taken_micro": taken,
    }
    assert money["receipt"]["amounts"]["provider_cost_micro"] == taken
    assert money["receipt"]["amounts"]["uncollected_micro"] == uncollected
    assert money["receipt"]["measured"]["provider_cost_micro"] == cost
    assert (money["group"].settled_micro, money["group"].spent_micro) == (taken, taken)
    assert money["key"].spent_micro == taken
    assert money["row"].provider_cost_micro == cost  # what the vendor measured
    # The counters state the remainder on its own, moved with what was taken.
    assert uncollected == 13_519 - (hold + 1_000)
    assert money["group"].uncollected_micro == uncollected
    assert money["key"].uncollected_micro == uncollected
    # The tenant API shows them as the store has them.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    group = api.get(f"/api/groups/{tenant.group_id}").json()
    assert (group["settled_micro"], group["spent_micro"], group["uncollected_micro"]) == (
        taken,
        taken,
        uncollected,
    )
    key = api.get(f"/api/keys/{tenant.api_key_id}").json()
    assert (key["spent_micro"], key["uncollected_micro"]) == (taken, uncollected)
    spend = api.get(f"/api/groups/{tenant.group_id}/spend").json()
    assert (spend["settled_micro"], spend["uncollected_micro"]) == (taken, uncollected)
    # The usage event states what was taken as cost, and the remainder as its own unit.
    usage_events_flush(now=after_windows())
    [event] = UsageEvent.objects.filter(group_id=tenant.group_id)
    event_schema_validator().validate(event.payload)
    assert event.payload["requests"] == 1
    assert event.payload["units"]["provider_cost_micro_usd"] == taken
    assert event.payload["units"]["uncollected_micro_usd"] == uncollected
    # The probe's wallet covered all: nothing uncollected anywhere of its.
    [probe_event] = UsageEvent.objects.filter(group_id=probe.group_id)
    assert probe_event.payload["units"]["uncollected_micro_usd"] == 0
    assert Group.objects.get(pk=probe.group_id).uncollected_micro == 0
