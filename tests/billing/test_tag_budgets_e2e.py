"""Tag budgets through a real gateway, by the official SDKs: a request tagged
`X-Tollgate-Tags: customer-42` holds its worst case on the tag's budget before any vendor is
called, so 40 concurrent requests against a budget that fits exactly 10 worst cases are 10
served and 30 refused LM-4001 naming the tag; the tag's spend is then exactly what the served
usage rows cost, nothing left reserved. Tagless requests, unbudgeted tags and other accounts'
tags of the same name are untouched. A gateway killed mid-answer leaves the tag's hold
charged at the hold by the reaper.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import anthropic
import openai
import pytest
from django.utils import timezone

from accounts.models import Account
from accounts.periods import period_bounds, period_key
from billing.models import SpendHold, SpendHoldTag, TagSpend
from billing.reaper import expire_stale_holds
from billing.tag_budgets import tag_budget_create
from tests.billing.test_crash_safety import doomed, worst_case  # noqa: F401  (a fixture)
from tests.support.services import requires_postgres, requires_redis
from tests.support.usage import settled, usage_rows
from tests.support.waits import wait_until

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(180)]

REQUESTS = 40
ALLOWED = 10
HELLO = [{"role": "user", "content": "hello there"}]  # the stub bills 2 tokens in, 8 out
COST = 6  # 2 x 0.15 + 8 x 0.60 = 5.1 micro-USD, rounded up


def budget(tenant, tag: str, amount: int, period: str = "daily"):
    return tag_budget_create(
        account=Account.objects.get(pk=tenant.account_id),
        tag=tag,
        budget_max_micro=amount,
        budget_period=period,
    )


def spend(tenant, tag: str, period: str | None = None) -> tuple[int, int]:
    if period is None:
        period = period_key("daily", "UTC", timezone.now())
    row = TagSpend.objects.get(account_id=tenant.account_id, tag=tag, period=period)
    return row.spent_micro, row.reserved_micro


def tagged(*tags: str) -> dict:
    return {"X-Tollgate-Tags": ",".join(tags)} if tags else {}


async def storm(stack, tenant, tags: tuple[str, ...]) -> list:
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=tenant.api_key, max_retries=0)

    async def one():
        try:
            return await client.chat.completions.create(
                model="gpt-4o-mini", messages=HELLO, max_tokens=100, extra_headers=tagged(*tags)
            )
        except openai.APIStatusError as exc:
            return exc

    async with client:
        return await asyncio.gather(*(one() for _ in range(REQUESTS)))


def test_forty_concurrent_requests_on_a_budget_of_ten_worst_cases(stack):
    tenant = stack.tenant(wallet_micro=100_000_000)
    hold, _ = worst_case(stack, tenant)
    budget(tenant, "customer-42", ALLOWED * hold)
    stack.stub.faults({"kind": "slow", "delay_ms": 400, "times": REQUESTS})

    answers = asyncio.run(storm(stack, tenant, ("customer-42", "team-a")))

    refused = [a for a in answers if isinstance(a, openai.APIStatusError)]
    assert len(answers) - len(refused) == ALLOWED
    assert {(r.status_code, r.body["code"]) for r in refused} == {(402, "LM-4001")}
    assert {r.body["message"] for r in refused} == {
        "Budget exhausted: tag 'customer-42' has used its budget; this daily budget resets at "
        f"{period_bounds('daily', 'UTC', timezone.now())[1].isoformat()}."
    }
    assert len(stack.stub.vendor_calls()) == ALLOWED
    rows = settled(tenant, REQUESTS)
    charged = sum(r.provider_cost_micro + r.bandwidth_charge_micro for r in rows)
    assert charged == ALLOWED * COST
    assert spend(tenant, "customer-42") == (ALLOWED * COST, 0)
    assert not TagSpend.objects.filter(tag="team-a").exists()  # no budget: never held
    assert SpendHoldTag.objects.filter(tag_spend__account_id=tenant.account_id).count() == ALLOWED


def test_only_requests_carrying_a_budgeted_tag_are_bounded_by_it(stack):
    tenant = stack.tenant(wallet_micro=1_000_000)
    other_account = stack.tenant(wallet_micro=1_000_000)
    budget(tenant, "capped", 0)  # zero credit: a hard stop for any request tagged with it
    budget(other_account, "capped", 1_000_000)

    def ask(who, *tags: str, anthropic_sdk: bool = False):
        if anthropic_sdk:
            return stack.anthropic(who).messages.create(
                model="claude-3-5-haiku",
                max_tokens=100,
                messages=HELLO,
                extra_headers=tagged(*tags),
            )
        return stack.openai(who).chat.completions.create(
            model="gpt-4o-mini", messages=HELLO, max_tokens=100, extra_headers=tagged(*tags)
        )

    with pytest.raises(openai.APIStatusError) as refused:
        ask(tenant, "other", "capped")
    assert (refused.value.status_code, refused.value.body["code"]) == (402, "LM-4001")
    assert "tag 'capped' has used its budget" in refused.value.body["message"]
    with pytest.raises(anthropic.APIStatusError) as refused_too:
        ask(tenant, "capped", anthropic_sdk=True)
    assert refused_too.value.status_code == 402
    assert ask(tenant).usage.completion_tokens == 8  # tagless
    assert ask(tenant, "other").usage.completion_tokens == 8  # an unbudgeted tag
    assert ask(other_account, "capped").usage.completion_tokens == 8  # its own budget
    # A budget given to a tag is live on the gateway when the change returns (the key is
    # cached by now: the change evicts it over the config bus).
    budget(tenant, "other", 0)
    with pytest.raises(openai.APIStatusError) as refused_now:
        ask(tenant, "other")
    assert "tag 'other' has used its budget" in refused_now.value.body["message"]

    settled(other_account, 1)
    assert spend(other_account, "capped") == (COST, 0)
    # The refusals rolled back all they took, the tag's first row included.
    assert not TagSpend.objects.filter(account_id=tenant.account_id).exists()
    assert len(usage_rows(group_id=tenant.group_id, expect=4)) >= 4


def test_a_gateway_killed_mid_answer_leaves_the_tag_charged_at_its_hold(doomed):  # noqa: F811
    tenant = doomed.tenant(wallet_micro=1_000_000)
    hold, _ = worst_case(doomed, tenant)
    budget(tenant, "customer-42", 100 * hold, period="monthly")
    client = doomed.openai(tenant)

    doomed.kill_mid_stream(
        client,
        model="gpt-4o-mini",
        messages=HELLO,
        max_tokens=100,
        extra_headers=tagged("customer-42"),
    )
    month = period_key("monthly", "UTC", timezone.now())
    assert spend(tenant, "customer-42", month) == (0, hold)

    expire_stale_holds(now=timezone.now() + timedelta(seconds=10))
    wait_until(
        lambda: not SpendHold.objects.filter(group_id=tenant.group_id, status="held").exists(),
        what="the reaper",
    )
    assert SpendHold.objects.get(group_id=tenant.group_id).status == "charged"
    assert spend(tenant, "customer-42", month) == (hold, 0)


def test_a_cache_hit_holds_on_the_tag_and_is_charged_to_it(stack):
    from tests.gateway.test_response_cache import TTL, cacheable_profiles
    from tests.support.profiles import install_profiles

    install_profiles(stack.stub.url, cacheable_profiles(stack.stub.url))
    stack.gateway.reload()
    tenant = stack.tenant(wallet_micro=1_000_000)
    row = budget(tenant, "customer-42", 1_000_000)
    client = stack.openai(tenant)
    headers = {**TTL, **tagged("customer-42")}

    def ask():
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=HELLO, max_tokens=100, extra_headers=headers
        )
        return raw.headers["x-tollgate-cache"]

    assert [ask(), ask()] == ["miss", "hit"]
    rows = settled(tenant, 2)
    assert [r.cache_status for r in rows] == ["miss", "hit"]
    costs = [r.provider_cost_micro + r.bandwidth_charge_micro for r in rows]
    assert costs[1] > 0  # a hit is priced (the operator's share of the call it replays)
    assert spend(tenant, "customer-42") == (sum(costs), 0)

    # The tag's budget used up: the hit is refused before it is served, naming the tag.
    from billing.tag_budgets import tag_budget_update

    tag_budget_update(budget=row, budget_max_micro=sum(costs))
    with pytest.raises(openai.APIStatusError) as refused:
        ask()
    assert "tag 'customer-42' has used its budget" in refused.value.body["message"]
    assert len(stack.stub.vendor_calls()) == 1
