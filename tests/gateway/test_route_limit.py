"""One fallback, not a chain of five: a caller's route list holds at most TOLLGATE_MAX_ROUTE
models in total (default 2), whichever way it is given; a longer one is LM-2001 before any
vendor call, billed nothing."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.support.processes import manage_check
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows

HELLO = [{"role": "user", "content": "hello there"}]


def openai_ask(stack, tenant, model: str, **kwargs):
    return stack.openai(tenant).chat.completions.create(
        model=model, messages=HELLO, max_tokens=20, **kwargs
    )


def anthropic_ask(stack, tenant, model: str, **kwargs):
    return stack.anthropic(tenant).messages.create(
        model=model, messages=HELLO, max_tokens=20, **kwargs
    )


def expensive_bandwidth(tenant) -> None:
    """Price bytes high, so a refusal that charged for its bytes would show."""
    from accounts.models import Group

    Group.objects.filter(pk=tenant.group_id).update(bandwidth_micro_usd_per_gb=10**12)


def assert_billed_nothing(tenant, refusals: int) -> None:
    from accounts.models import Group
    from billing.models import Wallet

    rows = usage_rows(group_id=tenant.group_id, expect=refusals)
    assert [(r.status, r.error_code) for r in rows] == [(400, "LM-2001")] * refusals
    assert all(not r.upstream_sent and r.bandwidth_charge_micro == 0 for r in rows)
    assert all(r.provider_cost_micro == 0 for r in rows)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro) == (0, 0)
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == 100_000_000


OPENAI_TOO_LONG = {
    "model field": ("gpt-4o-mini,gpt-4o,router-mini", {}),
    "fallback_model": ("gpt-4o-mini", {"extra_body": {"fallback_model": "gpt-4o,router-mini"}}),
    "header": ("gpt-4o-mini", {"extra_headers": {"X-Tollgate-Fallback": "gpt-4o, router-mini"}}),
    "model and header": ("gpt-4o-mini,gpt-4o", {"extra_headers": {"X-Tollgate-Fallback": "x"}}),
}


def test_a_route_list_over_the_limit_is_lm_2001_in_the_openai_shape(stack):
    tenant = stack.tenant()
    expensive_bandwidth(tenant)

    for model, kwargs in OPENAI_TOO_LONG.values():
        with pytest.raises(openai.BadRequestError) as refused:
            openai_ask(stack, tenant, model, **kwargs)
        assert refused.value.status_code == 400
        assert refused.value.body["code"] == "LM-2001"
        assert "3 models; at most 2 are allowed" in refused.value.body["message"]

    assert stack.stub.vendor_calls() == []
    assert_billed_nothing(tenant, refusals=len(OPENAI_TOO_LONG))


def test_a_route_list_over_the_limit_is_lm_2001_in_the_anthropic_shape(stack):
    tenant = stack.tenant()
    expensive_bandwidth(tenant)
    too_long = [
        ("claude-3-5-haiku,gpt-4o-mini,gpt-4o", {}),
        ("claude-3-5-haiku", {"extra_body": {"fallback_model": "gpt-4o-mini,gpt-4o"}}),
        ("claude-3-5-haiku", {"extra_headers": {"X-Tollgate-Fallback": "gpt-4o-mini,gpt-4o"}}),
    ]

    for model, kwargs in too_long:
        with pytest.raises(anthropic.BadRequestError) as refused:
            anthropic_ask(stack, tenant, model, **kwargs)
        assert refused.value.status_code == 400
        assert refused.value.body["error"]["code"] == "LM-2001"
        assert "3 models; at most 2 are allowed" in refused.value.body["error"]["message"]

    assert stack.stub.vendor_calls() == []
    assert_billed_nothing(tenant, refusals=len(too_long))


def test_one_fallback_is_served_in_both_shapes_and_repeats_count_once(stack):
    tenant = stack.tenant()
    stack.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}})

    answer = openai_ask(
        stack, tenant, "gpt-4o-mini,gpt-4o-mini", extra_body={"fallback_model": "gpt-4o"}
    )
    assert answer.model == "gpt-4o"

    message = anthropic_ask(
        stack, tenant, "claude-3-5-haiku", extra_headers={"X-Tollgate-Fallback": "gpt-4o-mini"}
    )
    assert message.model == "claude-3-5-haiku"
    assert [c["model"] for c in stack.stub.vendor_calls()] == [
        "gpt-4o-mini",
        "gpt-4o-mini",
        "gpt-4o",
        "claude-3-5-haiku-latest",
    ]


def test_the_limit_is_a_setting(transactional_db, spawn_gateway, stub):
    stack = own_stack(spawn_gateway(TOLLGATE_MAX_ROUTE="3"), stub)
    tenant = stack.tenant()
    stack.stub.faults(
        {"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}},
        {"kind": "500", "times": 2, "match": {"model": "gpt-4o"}},
    )

    answer = openai_ask(stack, tenant, "gpt-4o-mini,gpt-4o,router-mini")
    assert answer.model == "router-mini"
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_ask(stack, tenant, "claude-3-5-haiku,gpt-4o-mini,gpt-4o,router-mini")
    assert "4 models; at most 3 are allowed" in refused.value.body["error"]["message"]


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_malformed_limit_stops_the_process_at_start(value, tmp_path):
    result = manage_check(tmp_path, TOLLGATE_MAX_ROUTE=value)
    assert result.returncode != 0
    assert "Malformed setting TOLLGATE_MAX_ROUTE" in result.stderr
