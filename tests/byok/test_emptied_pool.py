"""A pool whose last key was removed answers like no pool, by its fallback flag, end to end:
the official SDKs against a real gateway process, the key removed through the dashboard's
confirmation or the tenant API. Fallback on: the platform serves (and the wallet pays); off:
LM-3021 naming the empty pool, which the SDKs do not retry. Never the "benched" refusal: that
stays for keys that are really benched."""

from __future__ import annotations

import anthropic
import openai
import pytest

from accounts.models import Group
from billing.models import Wallet
from tests.byok.helpers import Byok, team_keys
from tests.dashboard.test_pages import page, signed_in
from tests.support.profiles import PLATFORM_KEY
from tests.support.usage import settled, usage_rows

HELLO = [{"role": "user", "content": "hello there"}]
EMPTY_AND_OFF = "No team key for stub-openai: its pool is empty and platform fallback is off."


def trail(row) -> list[tuple[str, str, str]]:
    return [(a.served_by, a.source, a.outcome) for a in row.attempts]


def remove_through_the_dashboard(tenant, key_id: int) -> str:
    """Remove a pool's last key as a person does: the confirmation, then its POST; return
    what the confirmation said the next request does."""
    client = signed_in(tenant)
    url = page(tenant, f"team-keys/{key_id}/remove/")
    asked = client.get(url).content.decode()
    said = asked.split('id="next-request"')[1].split("</p>")[0]
    assert client.post(url, {"confirm": "1"}).status_code == 302
    return said


def test_the_last_key_removed_with_fallback_on_sends_the_next_request_to_the_platform(stack):
    tenant = stack.tenant()
    [key_id] = team_keys(stack, tenant, "stub-openai", ["sk-team-last-1"], fallback=True)
    client = stack.openai(tenant)
    client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    wallet_before = Wallet.objects.get(account_id=tenant.account_id).balance_micro

    said = remove_through_the_dashboard(tenant, key_id)
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert 'data-next="platform"' in said and "served on the platform&#x27;s keys" in said
    assert answer.usage.completion_tokens == 8
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-last-1", PLATFORM_KEY]
    team_row, platform_row = sorted(settled(tenant, 2), key=lambda r: r.created_at)
    assert (team_row.served_by, team_row.byok_tokens_out, team_row.provider_cost_micro) == (
        "team",
        8,
        0,
    )
    # Served as with no pool: one platform attempt, judged by the platform's breaker.
    assert (
        platform_row.served_by,
        platform_row.status,
        platform_row.tokens_in,
        platform_row.tokens_out,
        platform_row.provider_cost_micro,
    ) == ("platform", 200, 2, 8, 6)
    assert trail(platform_row) == [("platform", "stub-openai:gpt-4o-mini:platform", "ok")]
    assert Group.objects.get(pk=tenant.group_id).settled_micro == 6
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == wallet_before - 6


def test_the_last_key_removed_with_fallback_off_is_lm_3021_not_retried_never_benched(stack):
    tenant = stack.tenant()
    [key_id] = team_keys(stack, tenant, "stub-openai", ["sk-team-last-2"])
    said = remove_through_the_dashboard(tenant, key_id)
    # The SDKs' own retries left on: the refusal says not to retry.
    retrying = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=tenant.api_key, max_retries=2)

    with pytest.raises(openai.RateLimitError) as refused:
        retrying.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert 'data-next="refused"' in said and EMPTY_AND_OFF in said
    assert refused.value.status_code == 429
    assert refused.value.body == {
        "message": EMPTY_AND_OFF,
        "type": "rate_limit_error",
        "code": "LM-3021",
    }
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert stack.stub.vendor_calls() == []
    [row] = usage_rows(group_id=tenant.group_id, expect=1)  # one request: no retry
    assert (row.status, row.error_code, row.provider_cost_micro, row.upstream_sent) == (
        429,
        "LM-3021",
        0,
        False,
    )
    assert trail(row) == [("", "stub-openai:gpt-4o-mini", "no_attempt")]
    assert Group.objects.get(pk=tenant.group_id).spent_micro == 0


def test_the_last_key_removed_through_the_api_answers_the_same_on_both_sdks(stack):
    tenant = stack.tenant()
    api = Byok(stack, tenant)
    [key_id] = team_keys(stack, tenant, "stub-openai", ["sk-team-last-3"])

    assert api.delete(key_id).status_code == 204  # an API does not ask first
    assert api.list().json()["providers"] == [
        {"provider": "stub-openai", "fallback": False, "keys": []}
    ]
    with pytest.raises(openai.RateLimitError) as via_openai:
        stack.openai(tenant).chat.completions.create(model="gpt-4o", messages=HELLO)
    # Any shape reaching the provider meets the same pool: Anthropic's SDK, on chat models.
    with pytest.raises(anthropic.RateLimitError) as via_anthropic:
        stack.anthropic(tenant).messages.create(model="gpt-4o", max_tokens=16, messages=HELLO)

    assert via_openai.value.body["message"] == EMPTY_AND_OFF
    assert via_anthropic.value.body["error"]["message"] == EMPTY_AND_OFF
    assert via_anthropic.value.response.headers["x-should-retry"] == "false"
    assert stack.stub.vendor_calls() == []

    # Fallback turned on afterwards: the emptied pool's requests go to the platform.
    assert api.fallback("stub-openai", True).status_code == 200
    answer = stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert answer.usage.completion_tokens == 8
    assert [c["key"] for c in stack.stub.vendor_calls()] == [PLATFORM_KEY]


def test_keys_really_benched_still_answer_the_benched_refusal(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-benched"])
    stack.stub.faults({"kind": "429", "retry_after": 60, "match": {"key": "sk-team-benched"}})

    for _ in range(2):  # the first meets the vendor's 429; the second, the bench
        with pytest.raises(openai.RateLimitError) as refused:
            stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
        assert refused.value.body["code"] == "LM-3021"
        assert refused.value.body["message"] == (
            "Every team key for stub-openai is benched or failing."
        )

    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-benched"]
