"""A vendor's 429 that survives the allowed tries and the fallback chain reaches the client
as 429 LM-3010, in our error language, with the vendor's Retry-After (1 s when it gave none
we can read). Team-key 429s still bench the key; with fallback off that stays LM-3021."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.byok.helpers import team_keys
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def fstack(transactional_db, tolerant_gateway, stub):
    # Failures here must never open a breaker: each case judges retries and fallback only.
    return own_stack(tolerant_gateway, stub)


def openai_ask(stack, tenant, model: str = "gpt-4o-mini", **kwargs):
    return stack.openai(tenant).chat.completions.create(
        model=model, messages=HELLO, max_tokens=20, **kwargs
    )


def vendor_models(stack) -> list[str]:
    return [call["model"] for call in stack.stub.vendor_calls()]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_vendor_429_reaches_the_openai_sdk_as_429_with_its_retry_after(fstack, stream):
    tenant = fstack.tenant()
    fstack.stub.faults(
        {"kind": "429", "retry_after": 7, "times": 2, "match": {"model": "gpt-4o-mini"}}
    )

    with pytest.raises(openai.RateLimitError) as refused:
        openai_ask(fstack, tenant, stream=stream)

    error = refused.value
    assert error.status_code == 429
    assert error.response.headers["retry-after"] == "7"
    assert error.body["code"] == "LM-3010"
    assert error.body["type"] == "rate_limit_error"
    assert set(error.body) == {"message", "type", "code"}
    assert "Rate limit reached (stub fault)" not in error.response.text  # never the vendor's
    assert vendor_models(fstack) == ["gpt-4o-mini", "gpt-4o-mini"]  # one retry, as before
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.status, row.error_code, row.provider_cost_micro) == (429, "LM-3010", 0)
    assert [(a.outcome, a.upstream_status) for a in row.attempts] == [
        ("upstream_error", 429),
        ("upstream_error", 429),
    ]


@pytest.mark.parametrize(
    ("vendor_retry_after", "client_retry_after"),
    [(2.5, "3"), ("soon", "1")],
    ids=["fraction-rounds-up", "unreadable-is-one-second"],
)
def test_a_vendor_429_reaches_the_anthropic_sdk_as_429(
    fstack, vendor_retry_after, client_retry_after
):
    tenant = fstack.tenant()
    fstack.stub.faults(
        {
            "kind": "429",
            "retry_after": vendor_retry_after,
            "times": 2,
            "match": {"model": "claude-3-5-haiku-latest"},
        }
    )

    with pytest.raises(anthropic.RateLimitError) as refused:
        fstack.anthropic(tenant).messages.create(
            model="claude-3-5-haiku", messages=HELLO, max_tokens=20
        )

    error = refused.value
    assert error.status_code == 429
    assert error.response.headers["retry-after"] == client_retry_after
    assert error.body["error"]["code"] == "LM-3010"
    assert vendor_models(fstack) == ["claude-3-5-haiku-latest"] * 2


def test_a_429_the_fallback_absorbs_never_reaches_the_client(fstack):
    tenant = fstack.tenant()
    fstack.stub.faults(
        {"kind": "429", "retry_after": 9, "times": 2, "match": {"model": "gpt-4o-mini"}}
    )

    answer = openai_ask(fstack, tenant, extra_body={"fallback_model": "gpt-4o"})

    assert answer.model == "gpt-4o"
    assert vendor_models(fstack) == ["gpt-4o-mini", "gpt-4o-mini", "gpt-4o"]


def test_the_client_gets_the_last_links_failure_429_or_not(fstack):
    tenant = fstack.tenant()
    fstack.stub.faults(
        {"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}},
        {"kind": "429", "retry_after": 4, "times": 2, "match": {"model": "gpt-4o"}},
    )
    with pytest.raises(openai.RateLimitError) as refused:
        openai_ask(fstack, tenant, model="gpt-4o-mini,gpt-4o")
    assert (refused.value.body["code"], refused.value.response.headers["retry-after"]) == (
        "LM-3010",
        "4",
    )

    fstack.stub.clear()
    fstack.stub.faults(
        {"kind": "429", "retry_after": 4, "times": 2, "match": {"model": "gpt-4o-mini"}},
        {"kind": "500", "times": 2, "match": {"model": "gpt-4o"}},
    )
    with pytest.raises(openai.InternalServerError) as failed:
        openai_ask(fstack, tenant, model="gpt-4o-mini,gpt-4o")
    assert (failed.value.status_code, failed.value.body["code"]) == (502, "LM-5001")


def test_team_key_429s_still_bench_and_end_in_lm_3021_with_fallback_off(fstack):
    tenant = fstack.tenant()
    team_keys(fstack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])  # fallback off
    fstack.stub.faults({"kind": "429", "retry_after": 60, "times": 2})

    for _ in range(2):
        with pytest.raises(openai.RateLimitError) as refused:
            openai_ask(fstack, tenant)
        assert refused.value.body["code"] == "LM-3021"
        assert "retry-after" not in refused.value.response.headers
    # Both keys benched on the first request; the second is decided without a vendor call.
    assert [c["key"] for c in fstack.stub.vendor_calls()] == ["sk-team-a", "sk-team-b"]
