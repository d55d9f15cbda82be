"""Per-caller budgets keyed by the caller label: one caller's spend leaves another's alone."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from accounts.models import Group
from billing.models import CallerSpend, SpendHold
from tests.billing.test_money_e2e import COST, HELLO, worst_case
from tests.support.profiles import install_profiles
from tests.support.services import clear_shared_state
from tests.support.stacks import Stack
from tests.support.waits import wait_until


@pytest.fixture
def labelled(transactional_db, spawn_gateway, stub) -> Iterator[Stack]:
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    gateway = spawn_gateway(TOLLGATE_CALLER_KEY="caller-key-for-tests-0123456789")
    yield Stack(gateway=gateway, stub=stub)
    gateway.stop()


def ask_as(stack, tenant, user: str):
    return stack.openai(tenant).chat.completions.create(
        model="gpt-4o-mini", messages=HELLO, max_tokens=100, user=user
    )


def test_one_callers_spend_leaves_another_callers_budget_untouched(labelled):
    tenant = labelled.tenant(invoiced=True)
    hold = worst_case(labelled, tenant, max_tokens=100)
    Group.objects.filter(pk=tenant.group_id).update(caller_budget_max_micro=hold + COST - 1)
    labelled.gateway.reload()

    ask_as(labelled, tenant, "alice@example.com")
    wait_until(lambda: not SpendHold.objects.filter(status="held").exists(), what="settle")
    with pytest.raises(openai.APIStatusError) as refused:
        ask_as(labelled, tenant, "alice@example.com")
    answer = ask_as(labelled, tenant, "bob@example.com")

    assert refused.value.status_code == 402 and refused.value.body["code"] == "LM-4001"
    assert "caller budget" in refused.value.body["message"]
    assert answer.usage.completion_tokens == 8
    wait_until(lambda: not SpendHold.objects.filter(status="held").exists(), what="settle")
    spends = sorted(
        CallerSpend.objects.filter(group_id=tenant.group_id).values_list(
            "spent_micro", "reserved_micro"
        )
    )
    assert spends == [(COST, 0), (COST, 0)]
    labels = set(CallerSpend.objects.values_list("caller_label", flat=True))
    assert all(label.startswith("c_") and "alice" not in label for label in labels)
    users = [c["user"] for c in labelled.stub.vendor_calls()]  # forwarded: labels, not ids
    assert len(users) == 2 and users[0] != users[1] and set(users) == labels
