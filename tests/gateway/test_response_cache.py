"""The response cache through a real gateway, driven by the official SDKs.

A request that asks (`X-Tollgate-Cache-TTL`) or whose group caches `always` is answered once
by the vendor; the same request again is a hit: the same answer, no vendor call, priced at the
operator's share of the call it replays, with a usage row and a receipt saying so. Answers
never cross accounts, nor groups or keys when the scope says so.
"""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from tests.support.profiles import install_profiles, stub_profiles
from tests.support.usage import settled, usage_rows

PROMPT = [{"role": "user", "content": "say something worth keeping"}]
TTL = {"X-Tollgate-Cache-TTL": "300"}
MINI_IN, MINI_OUT = 150_000, 600_000  # gpt-4o-mini's prices in the stub profiles
HIT_PCT = 10


def cacheable_profiles(stub_url: str, **terms) -> list[dict]:
    spec = stub_profiles(stub_url)
    for profile in spec:
        for model in profile.get("models", ()):
            model.update(cacheable=True, cache_hit_price_pct=HIT_PCT, **terms)
    return spec


@pytest.fixture
def cached(stack):
    install_profiles(stack.stub.url, cacheable_profiles(stack.stub.url))
    stack.gateway.reload()
    return stack


def ask(client, *, headers=TTL, model="gpt-4o-mini", messages=PROMPT, **create):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages, extra_headers=headers, **create
    )
    return raw.headers, raw.parse()


def vendor_calls(stack) -> int:
    return sum(1 for call in stack.stub.calls() if call["model"] is not None)


def micro(tokens_in: int, tokens_out: int, price_in: int, price_out: int) -> int:
    """The cost rule of DESIGN: one rounding, up, to whole micro-USD."""
    return -(-(tokens_in * price_in + tokens_out * price_out) // 1_000_000)


def set_cache(group_id: int, **fields) -> None:
    from accounts.models import Group
    from accounts.services import group_changed

    Group.objects.filter(pk=group_id).update(**fields)
    group_changed(group=Group.objects.get(pk=group_id))


def test_the_same_request_again_is_a_priced_hit_with_its_own_row_and_receipt(cached):
    from billing.models import Receipt, Wallet

    tenant = cached.tenant()
    client = cached.openai(tenant)
    balance_before = Wallet.objects.get(account_id=tenant.account_id).balance_micro

    first_headers, first = ask(client)
    again_headers, again = ask(client)

    assert first_headers["x-tollgate-cache"] == "miss" and "age" not in first_headers
    assert again_headers["x-tollgate-cache"] == "hit" and int(again_headers["age"]) >= 0
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens == first.usage.prompt_tokens
    assert again.usage.completion_tokens == first.usage.completion_tokens
    assert again.id != first.id  # its own request
    assert vendor_calls(cached) == 1

    miss_row, hit_row = settled(tenant, 2)
    tokens_in, tokens_out = first.usage.prompt_tokens, first.usage.completion_tokens
    full = micro(tokens_in, tokens_out, MINI_IN, MINI_OUT)
    hit_price = micro(tokens_in, tokens_out, MINI_IN * HIT_PCT // 100, MINI_OUT * HIT_PCT // 100)
    assert (miss_row.cache_status, miss_row.provider_cost_micro) == ("miss", full)
    assert (hit_row.cache_status, hit_row.provider_cost_micro) == ("hit", hit_price)
    assert hit_row.uncached_cost_micro == full and miss_row.uncached_cost_micro == 0
    assert (hit_row.tokens_in, hit_row.tokens_out) == (tokens_in, tokens_out)
    assert not hit_row.upstream_sent and hit_row.bandwidth_charge_micro == 0
    [attempt] = hit_row.attempts
    assert (attempt.provider, attempt.outcome, attempt.served_by) == ("cache", "ok", "platform")
    # The prepaid wallet paid the call once and the hit its price.
    balance_after = Wallet.objects.get(account_id=tenant.account_id).balance_micro
    assert balance_before - balance_after == full + hit_price

    receipt = Receipt.objects.get(account_id=tenant.account_id, request_id=hit_row.request_id)
    assert (receipt.kind, receipt.cost_micro) == ("cache_hit", hit_price)
    assert f'"uncached_cost_micro":{full}' in receipt.body


def test_two_accounts_sending_identical_bodies_never_share_an_answer(cached):
    one, other = cached.tenant(), cached.tenant()

    assert ask(cached.openai(one))[0]["x-tollgate-cache"] == "miss"
    assert ask(cached.openai(other))[0]["x-tollgate-cache"] == "miss"
    assert ask(cached.openai(one))[0]["x-tollgate-cache"] == "hit"
    assert ask(cached.openai(other))[0]["x-tollgate-cache"] == "hit"
    assert vendor_calls(cached) == 2


def test_the_scope_narrows_sharing_to_the_key(cached):
    from accounts.models import ApiKey
    from accounts.services import api_key_create

    tenant = cached.tenant()
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    _, second_secret = api_key_create(group=key.group, name="second")
    second = cached.openai(replace(tenant, api_key=second_secret))

    ask(cached.openai(tenant))
    assert ask(second)[0]["x-tollgate-cache"] == "hit"  # the account shares by default

    set_cache(tenant.group_id, cache_scope="key")
    assert ask(second)[0]["x-tollgate-cache"] == "miss"  # the key's own answer
    assert ask(second)[0]["x-tollgate-cache"] == "hit"
    assert vendor_calls(cached) == 2


def test_who_decides_the_tenant_the_request_and_the_operator(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)

    # On request (the default): a request that does not ask is bypassed, twice.
    assert ask(client, headers={})[0]["x-tollgate-cache"] == "bypass"
    assert ask(client, headers={})[0]["x-tollgate-cache"] == "bypass"
    # Always: no header needed; a TTL of 0 turns it off for one request.
    set_cache(tenant.group_id, cache_mode="always", cache_ttl_s=600)
    assert ask(client, headers={})[0]["x-tollgate-cache"] == "miss"
    assert ask(client, headers={})[0]["x-tollgate-cache"] == "hit"
    assert ask(client, headers={"X-Tollgate-Cache-TTL": "0"})[0]["x-tollgate-cache"] == "bypass"
    # Off: whatever the request asks.
    set_cache(tenant.group_id, cache_mode="off")
    assert ask(client)[0]["x-tollgate-cache"] == "bypass"
    assert vendor_calls(cached) == 5

    # The operator: a model not marked cacheable is bypassed whatever the tenant says.
    install_profiles(cached.stub.url, stub_profiles(cached.stub.url))
    cached.gateway.reload()
    set_cache(tenant.group_id, cache_mode="always")
    assert ask(client)[0]["x-tollgate-cache"] == "bypass"

    rows = usage_rows(group_id=tenant.group_id, expect=7)
    assert [row.cache_status for row in rows] == [
        "bypass",
        "bypass",
        "miss",
        "hit",
        "bypass",
        "bypass",
        "bypass",
    ]


def test_no_cache_skips_the_lookup_and_no_store_keeps_nothing(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)

    no_store = {**TTL, "Cache-Control": "no-store"}
    assert ask(client, headers=no_store)[0]["x-tollgate-cache"] == "miss"
    assert ask(client)[0]["x-tollgate-cache"] == "miss"  # nothing was kept
    assert ask(client, headers=no_store)[0]["x-tollgate-cache"] == "hit"  # may still be served
    no_cache = {**TTL, "Cache-Control": "no-cache"}
    assert ask(client, headers=no_cache)[0]["x-tollgate-cache"] == "miss"  # fresh, and kept
    assert vendor_calls(cached) == 3
    assert ask(client)[0]["x-tollgate-cache"] == "hit"


def test_a_malformed_ttl_header_is_refused_in_our_language(cached):
    tenant = cached.tenant()
    response = httpx.post(
        f"{cached.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {tenant.api_key}", "X-Tollgate-Cache-TTL": "soon"},
        json={"model": "gpt-4o-mini", "messages": PROMPT},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "LM-2001"
    assert "X-Tollgate-Cache-TTL" in response.json()["error"]["message"]
    assert vendor_calls(cached) == 0


def test_different_sampling_or_tools_is_another_answer(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)

    ask(client)
    assert ask(client, temperature=0.2)[0]["x-tollgate-cache"] == "miss"
    assert ask(client, seed=7)[0]["x-tollgate-cache"] == "miss"
    assert ask(client, user="someone-else")[0]["x-tollgate-cache"] == "hit"  # a label only
    assert vendor_calls(cached) == 3


def test_errors_and_cut_streams_are_never_kept(cached):
    import openai

    tenant = cached.tenant()
    client = cached.openai(tenant)

    # A stream the vendor cuts after two tokens: served as far as it went, never kept.
    cached.stub.faults({"kind": "fail_after_tokens", "after_tokens": 2, "times": 1})
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=PROMPT, stream=True, extra_headers=TTL
    )
    assert raw.headers["x-tollgate-cache"] == "miss"
    with pytest.raises(openai.APIError):
        list(raw.parse())
    # A vendor error: refused, never kept.
    cached.stub.faults({"kind": "401", "times": 1})
    with pytest.raises(openai.APIStatusError) as refused:
        ask(client, model="gpt-4o")
    assert refused.value.response.headers["x-tollgate-cache"] == "miss"

    assert ask(client)[0]["x-tollgate-cache"] == "miss"  # the cut stream left nothing
    assert ask(client)[0]["x-tollgate-cache"] == "hit"
    assert ask(client, model="gpt-4o")[0]["x-tollgate-cache"] == "miss"
    rows = usage_rows(group_id=tenant.group_id, expect=5)
    assert [(row.cache_status, row.status) for row in rows][2:] == [
        ("miss", 200),
        ("hit", 200),
        ("miss", 200),
    ]
    assert rows[0].error_code and rows[1].error_code


def test_a_hit_is_held_at_its_price_so_a_budget_too_small_for_a_call_still_serves_it(cached):
    import openai

    from accounts.models import Group

    tenant = cached.tenant(budget_micro=1_000_000)
    client = cached.openai(tenant)
    _, first = ask(client, max_tokens=50)
    [miss] = settled(tenant, 1)
    # Leave the group less than a fresh call's worst case, more than a hit's price.
    spent = Group.objects.get(pk=tenant.group_id).spent_micro
    assert spent == miss.provider_cost_micro
    Group.objects.filter(pk=tenant.group_id).update(budget_max_micro=spent + 5)
    set_cache(tenant.group_id)  # announce the change

    with pytest.raises(openai.APIStatusError) as refused:
        ask(client, max_tokens=50, messages=[{"role": "user", "content": "a fresh question"}])
    assert refused.value.body["code"] == "LM-4001"
    headers, again = ask(client, max_tokens=50)
    assert headers["x-tollgate-cache"] == "hit"
    assert again.choices[0].message.content == first.choices[0].message.content
    hit = settled(tenant, 3)[-1]
    assert hit.cache_status == "hit" and 0 < hit.provider_cost_micro <= 5
    group = Group.objects.get(pk=tenant.group_id)
    assert group.spent_micro == spent + hit.provider_cost_micro
    assert group.reserved_micro == 0


def test_a_fallbacks_answer_is_replayed_named_and_priced_as_the_fallback(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)
    chain = {"X-Tollgate-Fallback": "gpt-4o", **TTL}
    cached.stub.faults({"kind": "500", "times": 20, "match": {"model": "gpt-4o-mini"}})

    _, first = ask(client, headers=chain)
    cached.stub.clear()  # the first model answers again: the hit is still the fallback's
    headers, again = ask(client, headers=chain)

    assert headers["x-tollgate-cache"] == "hit"
    assert first.model == again.model == "gpt-4o"
    assert again.choices[0].message.content == first.choices[0].message.content
    miss, hit = settled(tenant, 2)
    assert (miss.model_served, hit.model_served) == ("gpt-4o", "gpt-4o")
    full = micro(first.usage.prompt_tokens, first.usage.completion_tokens, 2_500_000, 10_000_000)
    assert (miss.provider_cost_micro, hit.uncached_cost_micro) == (full, full)
    assert hit.provider_cost_micro == micro(
        first.usage.prompt_tokens, first.usage.completion_tokens, 250_000, 1_000_000
    )
