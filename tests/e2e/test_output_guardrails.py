"""Output guardrails end to end through the official SDKs and a real gateway: a streamed
answer blocked mid-way gets the text before the value, then LM-2030 in its client's shape,
and is billed what was delivered; a redacting guardrail's value never reaches the client,
streamed or whole, in chat, messages or Responses (its closing events included), and such an
answer is never cached; a blocked whole answer is billed as the vendor billed it.

The stub answers "Hello from the stub model <vendor model> reply ok", one word per event.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from billing.models import Wallet
from core.money import TokenPrices
from gateway.plan import prompt_bound
from gateway.shapes import openai as openai_shape
from gateway.shapes import responses as responses_shape
from tests.e2e.test_input_guardrails import attach, guardrail
from tests.gateway.test_response_cache import TTL
from tests.support.profiles import install_profiles
from tests.support.usage import settled

WALLET = 10_000_000
PRICES = {"input_micro_per_mtok": 1_000_000, "output_micro_per_mtok": 10_000_000}
HELLO = [{"role": "user", "content": "hello there"}]
HELLO_TOKENS = 2  # the stub counts the prompt's words
ANSWER = "Hello from the stub model {model} reply ok"
UPSTREAM = {"out-gpt": "gpt-4o-mini", "out-claude": "claude-3-5-haiku-latest"}
NO_REPLY = "Blocked by guardrail 'no-reply' (output): it found 1 value of kind custom."


def output_profiles(stub_url: str) -> list[dict]:
    """One model on each vendor shape, priced so every token shows, and cacheable."""
    cache = {"cacheable": True, "cache_hit_price_pct": 10}
    return [
        {
            "name": "out-openai",
            "kind": "openai",
            "base_url": f"{stub_url}/v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [{"name": "out-gpt", "upstream": UPSTREAM["out-gpt"], **PRICES, **cache}],
        },
        {
            "name": "out-anthropic",
            "kind": "anthropic",
            "base_url": stub_url,
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {"name": "out-claude", "upstream": UPSTREAM["out-claude"], **PRICES, **cache}
            ],
        },
    ]


@pytest.fixture
def guarded(stack):
    install_profiles(stack.stub.url, output_profiles(stack.stub.url))
    stack.gateway.reload()
    return stack


def tenant_with(stack, **fields):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    attach(guardrail(tenant.account_id, kind="custom", phase="output", **fields), tenant,
           by="tenant")  # fmt: skip
    return tenant


def chat_stream(stack, tenant, model: str) -> tuple[str, Exception | None]:
    text, failed = "", None
    try:
        for chunk in stack.openai(tenant).chat.completions.create(
            model=model, messages=HELLO, stream=True
        ):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
    except openai.APIError as exc:
        failed = exc
    return text, failed


def messages_stream(stack, tenant, model: str) -> tuple[str, Exception | None]:
    text, failed = "", None
    try:
        for event in stack.anthropic(tenant).messages.create(
            model=model, messages=HELLO, max_tokens=100, stream=True
        ):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text += event.delta.text
    except anthropic.APIError as exc:
        failed = exc
    return text, failed


def responses_stream(stack, tenant, model: str) -> tuple[str, Exception | None]:
    text, failed = "", None
    try:
        for event in stack.openai(tenant).responses.create(model=model, input=HELLO, stream=True):
            if event.type == "response.output_text.delta":
                text += event.delta
    except openai.APIError as exc:
        failed = exc
    return text, failed


STREAMS = {"chat": chat_stream, "messages": messages_stream, "responses": responses_stream}


@pytest.mark.parametrize(
    ("route", "model"),
    [("chat", "out-gpt"), ("messages", "out-claude"), ("responses", "out-gpt"),
     ("chat", "out-claude"), ("messages", "out-gpt")],
)  # fmt: skip
def test_a_stream_blocked_midway_ends_with_our_error_and_bills_what_was_delivered(
    guarded, route, model
):
    tenant = tenant_with(guarded, name="no-reply", words=["reply"], action="block")

    text, failed = STREAMS[route](guarded, tenant, model)

    # The text before the value, then our error (the SDK raises it), never the value.
    assert text == "Hello from the stub model " + UPSTREAM[model] + " "
    assert failed is not None and NO_REPLY in str(failed) and "LM-2030" in str(failed.body)
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.streamed) == (400, "LM-2030", True)
    assert row.guardrails == [
        {"guardrail": "no-reply", "phase": "output", "action": "block", "matches": 1}
    ]
    # What was delivered: the prefix left in one event (one output token); the prompt as
    # the vendor told it (Anthropic, in its first event) or its bound (told only at the end).
    told = model == "out-claude"
    parse = responses_shape.parse_request if route == "responses" else openai_shape.parse_request
    body = {"model": model, "messages": HELLO, "input": HELLO}
    tokens_in = HELLO_TOKENS if told else prompt_bound(parse(body))
    cost = TokenPrices.configured(**PRICES).cost_micro(tokens_in=tokens_in, tokens_out=1)
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (tokens_in, 1, cost)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET - cost, 0)
    [call] = guarded.stub.vendor_calls()
    assert call["stream"] is True


def test_a_redacted_answer_never_shows_the_value_streamed_or_whole_and_is_never_cached(guarded):
    tenant = tenant_with(guarded, name="no-stub", patterns=["stub"], action="redact")
    client = guarded.openai(tenant)
    redacted = ANSWER.format(model="gpt-4o-mini").replace("stub", "[REDACTED:custom]")

    # Responses, streamed: the deltas and the closing events (the SDK's final response).
    with client.responses.stream(model="out-gpt", input=HELLO) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas == final.output_text == redacted
    # Chat, whole, twice with the cache asked: a rewritten answer is never stored.
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="out-gpt", messages=HELLO, extra_headers=TTL
        )
        assert raw.parse().choices[0].message.content == redacted
        assert raw.headers["x-tollgate-cache"] == "miss"
    # Messages, whole, translated from an OpenAI vendor.
    message = guarded.anthropic(tenant).messages.create(
        model="out-gpt", messages=HELLO, max_tokens=100
    )
    assert message.content[0].text == redacted
    rows = settled(tenant, 4)
    assert [row.guardrails for row in rows] == [
        [{"guardrail": "no-stub", "phase": "output", "action": "redact", "matches": 1}]
    ] * 4
    assert [row.tokens_out for row in rows] == [8] * 4  # the vendor's whole answer, billed
    assert len(guarded.stub.vendor_calls()) == 4


def test_a_blocked_whole_answer_is_our_error_billed_as_the_vendor_billed_it(guarded):
    tenant = tenant_with(guarded, name="no-reply", words=["reply"], action="block")

    with pytest.raises(anthropic.BadRequestError) as refused:
        guarded.anthropic(tenant).messages.create(
            model="out-claude", messages=HELLO, max_tokens=100
        )

    assert refused.value.body["error"]["message"] == NO_REPLY
    assert "reply ok" not in str(refused.value.body)
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.streamed) == (400, "LM-2030", False)
    cost = TokenPrices.configured(**PRICES).cost_micro(tokens_in=HELLO_TOKENS, tokens_out=8)
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (HELLO_TOKENS, 8, cost)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET - cost, 0)


def test_a_flagged_stream_is_served_whole_and_recorded(guarded):
    tenant = tenant_with(guarded, name="flag-model", words=["model"], action="flag")

    text, failed = chat_stream(guarded, tenant, "out-claude")

    assert failed is None
    assert text == ANSWER.format(model=UPSTREAM["out-claude"])
    [row] = settled(tenant, 1)
    assert (row.status, row.guardrails) == (
        200,
        [{"guardrail": "flag-model", "phase": "output", "action": "flag", "matches": 1}],
    )


def test_a_stream_the_vendor_breaks_off_is_recorded_as_not_all_seen(guarded):
    tenant = tenant_with(guarded, name="flag-model", words=["model"], action="flag")
    guarded.stub.faults({"kind": "fail_after_tokens", "after_tokens": 3})

    text, failed = chat_stream(guarded, tenant, "out-gpt")

    # Three words arrived and stayed held: unchecked text is never sent, and the stream ends
    # with the vendor's failure.
    assert text == ""
    assert failed is not None and failed.body["code"] == "LM-5001"
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code) == (502, "LM-5001")
    assert row.guardrails == [
        {"guardrail": "flag-model", "phase": "output", "action": "flag", "matches": 0,
         "complete": False}
    ]  # fmt: skip
    assert (row.tokens_out, row.provider_cost_micro) == (0, 0)  # nothing was delivered
