"""`POST /v1/responses` through the official SDK, on three kinds of vendor.

OpenAI's own API serves it natively (the stub's `/v1/responses`); a chat-only
OpenAI-compatible vendor gets it as chat completions; an Anthropic vendor as messages. The
stub counts prompt tokens as words (instructions included; +10 per tool), answers the 8
words "Hello from the stub model <model> reply ok", calls tools with arguments built from
their schemas (5 output tokens a call) unless the last input is a tool's output, and
answers JSON for a JSON text format. Each test checks what reached the vendor and what the
tenant was billed, to the micro-USD.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pydantic
import pytest

from accounts.models import Group
from billing.models import Reservation
from core.money import TokenPrices
from tests.byok.helpers import team_keys
from tests.support.profiles import api_profiles
from tests.support.stacks import own_stack
from tests.support.usage import settled

PRICES = {
    "gpt-4o-mini": (150_000, 600_000),
    "compat-mini": (100_000, 400_000),
    "claude-3-5-haiku": (800_000, 4_000_000),
    "o4-mini": (1_100_000, 4_400_000),
}
# Each vendor kind: the model asked for, the path the stub saw, the model name it got.
VENDORS = [
    ("gpt-4o-mini", "/v1/responses", "gpt-4o-mini"),
    ("compat-mini", "/compat/v1/chat/completions", "local-mini"),
    ("claude-3-5-haiku", "/v1/messages", "claude-3-5-haiku-latest"),
]
VENDOR_IDS = ["native", "as-chat", "as-anthropic"]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
}
STUB_ARGS = {"city": "stub", "days": 1}
QUESTION = "What is the weather in Paris"  # 6 words
INSTRUCTIONS = "Be brief."  # 2 words


class Weather(pydantic.BaseModel):
    city: str
    days: int


@pytest.fixture
def api(transactional_db, shared_gateway, stub):
    return own_stack(shared_gateway, stub, api_profiles(stub.url))


def cost(model: str, tokens_in: int, tokens_out: int) -> int:
    price_in, price_out = PRICES[model]
    return TokenPrices.configured(
        input_micro_per_mtok=price_in, output_micro_per_mtok=price_out
    ).cost_micro(tokens_in=tokens_in, tokens_out=tokens_out)


def words(upstream: str) -> str:
    return f"Hello from the stub model {upstream} reply ok"


def assert_billed(row, model: str, tokens_in: int, tokens_out: int) -> None:
    assert (row.endpoint, row.model_served, row.tokens_in, row.tokens_out) == (
        "responses",
        model,
        tokens_in,
        tokens_out,
    )
    assert row.provider_cost_micro == cost(model, tokens_in, tokens_out)


# ---------------------------------------------------------------- text


@pytest.mark.parametrize(("model", "path", "upstream"), VENDORS, ids=VENDOR_IDS)
def test_create_answers_text_on_every_vendor_kind(api, model, path, upstream):
    tenant = api.tenant()

    response = api.openai(tenant).responses.create(
        model=model, instructions=INSTRUCTIONS, input=QUESTION, max_output_tokens=50
    )

    assert response.output_text == words(upstream)
    assert (response.status, response.model) == ("completed", model)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (8, 8)
    assert response.usage.total_tokens == 16
    [call] = api.stub.vendor_calls()
    assert (call["path"], call["model"]) == (path, upstream)
    body = call["body"]
    if path == "/v1/responses":  # the client's body, with what Tollgate owns set again
        assert body == {
            "model": upstream,
            "instructions": INSTRUCTIONS,
            "input": QUESTION,
            "max_output_tokens": 50,
            "store": False,
        }
    elif path.endswith("/chat/completions"):
        assert body["messages"] == [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": QUESTION},
        ]
        assert body["max_tokens"] == 50
    else:
        assert (body["system"], body["max_tokens"]) == (INSTRUCTIONS, 50)
        assert body["messages"] == [{"role": "user", "content": QUESTION}]
    [row] = settled(tenant, 1)
    assert response.id == f"resp_{row.request_id}"
    assert_billed(row, model, 8, 8)
    [reservation] = Reservation.objects.filter(wallet__account_id=tenant.account_id)
    assert reservation.committed_micro == cost(model, 8, 8)


@pytest.mark.parametrize(("model", "path", "upstream"), VENDORS, ids=VENDOR_IDS)
def test_stream_sends_the_typed_events_and_bills_the_completed_usage(api, model, path, upstream):
    tenant = api.tenant()

    with api.openai(tenant).responses.stream(
        model=model, instructions=INSTRUCTIONS, input=QUESTION
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()

    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 8
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    assert final.output_text == words(upstream)
    assert (final.usage.input_tokens, final.usage.output_tokens) == (8, 8)
    [call] = api.stub.vendor_calls()
    assert (call["path"], call["stream"]) == (path, True)
    [row] = settled(tenant, 1)
    assert final.id == f"resp_{row.request_id}"
    assert row.streamed
    assert_billed(row, model, 8, 8)


# ---------------------------------------------------------------- tools


def function_call_round_trip(client, model: str, *, stream: bool):
    """Ask with a tool, send back the call's output, get the final answer."""
    items = [{"role": "user", "content": QUESTION}]
    if stream:
        with client.responses.stream(model=model, input=items, tools=[WEATHER]) as s:
            deltas = [e.delta for e in s if e.type == "response.function_call_arguments.delta"]
            first = s.get_final_response()
        assert "".join(deltas) == first.output[-1].arguments
    else:
        first = client.responses.create(model=model, input=items, tools=[WEATHER])
    [call] = [item for item in first.output if item.type == "function_call"]
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "sunny"})
    final = client.responses.create(model=model, input=items, tools=[WEATHER])
    return first, call, final


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(("model", "path", "upstream"), VENDORS, ids=VENDOR_IDS)
def test_a_function_calling_round_trip(api, model, path, upstream, stream):
    tenant = api.tenant()

    first, call, final = function_call_round_trip(api.openai(tenant), model, stream=stream)

    assert (call.name, json.loads(call.arguments)) == ("get_weather", STUB_ARGS)
    assert final.output_text == words(upstream)
    calls = api.stub.vendor_calls()
    assert [c["path"] for c in calls] == [path, path]
    last = calls[1]["body"]
    if path == "/v1/responses":
        assert last["input"][-1] == {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": "sunny",
        }
    elif path.endswith("/chat/completions"):
        assert last["messages"][-1] == {
            "role": "tool",
            "tool_call_id": call.call_id,
            "content": "sunny",
        }
        assert last["tools"] == [
            {
                "type": "function",
                "function": {k: v for k, v in WEATHER.items() if k != "type"},
            }
        ]
    else:
        assert last["messages"][-1] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.call_id, "content": "sunny"}],
        }
    # Prompt: 6 words + 10 for the tool; then + the output "sunny" (the call itself counts
    # no words). Output: 5 tokens for the call, then the 8 words.
    rows = settled(tenant, 2)
    assert [(r.tokens_in, r.tokens_out) for r in rows] == [
        (first.usage.input_tokens, first.usage.output_tokens),
        (final.usage.input_tokens, final.usage.output_tokens),
    ]
    assert (first.usage.input_tokens, first.usage.output_tokens) == (16, 5)
    assert final.usage.output_tokens == 8
    assert [r.provider_cost_micro for r in rows] == [
        cost(model, r.tokens_in, r.tokens_out) for r in rows
    ]


@pytest.mark.parametrize(("model", "path", "upstream"), VENDORS, ids=VENDOR_IDS)
def test_parse_returns_the_json_schema_answer_as_a_model(api, model, path, upstream):
    tenant = api.tenant()

    parsed = api.openai(tenant).responses.parse(model=model, input=QUESTION, text_format=Weather)

    assert parsed.output_parsed == Weather(**STUB_ARGS)
    [call] = api.stub.vendor_calls()
    assert call["path"] == path
    [row] = settled(tenant, 1)
    assert row.tokens_in == parsed.usage.input_tokens
    assert row.provider_cost_micro == cost(model, row.tokens_in, row.tokens_out)


# ---------------------------------------------------------------- output cap, reasoning


@pytest.mark.parametrize(
    ("model", "path", "upstream"), [VENDORS[0], VENDORS[2]], ids=["native", "as-anthropic"]
)
def test_the_output_cap_cuts_the_answer_as_incomplete(api, model, path, upstream):
    tenant = api.tenant()

    response = api.openai(tenant).responses.create(model=model, input=QUESTION, max_output_tokens=3)

    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "Hello from the"
    [row] = settled(tenant, 1)
    assert_billed(row, model, 6, 3)


def test_a_reasoning_models_tokens_are_recorded(api):
    tenant = api.tenant()

    response = api.openai(tenant).responses.create(
        model="o4-mini", input=QUESTION, reasoning={"effort": "low"}
    )

    assert response.usage.output_tokens_details.reasoning_tokens == 16
    assert response.output[0].type == "reasoning"
    [row] = settled(tenant, 1)
    assert (row.reasoning_tokens, row.tokens_out) == (16, 24)
    assert row.provider_cost_micro == cost("o4-mini", 6, 24)
    [call] = api.stub.vendor_calls()
    assert call["body"]["reasoning"] == {"effort": "low"}


# ---------------------------------------------------------------- refused, clearly


def test_stored_state_is_refused_and_no_response_is_kept(api):
    tenant = api.tenant()
    client = api.openai(tenant)

    with pytest.raises(openai.BadRequestError) as stored:
        client.responses.create(model="gpt-4o-mini", input=QUESTION, store=True)
    with pytest.raises(openai.BadRequestError) as continued:
        client.responses.create(
            model="gpt-4o-mini", input=QUESTION, previous_response_id="resp_abc"
        )
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve("resp_abc")
    anonymous = httpx.get(f"{api.url}/v1/responses/resp_abc")

    assert stored.value.body["code"] == "LM-2001"
    assert stored.value.body["message"] == (
        "'store' must be false: Tollgate keeps no responses. Send the whole conversation "
        "in 'input'."
    )
    assert continued.value.body["message"] == (
        "'previous_response_id' needs state kept at the vendor: Tollgate keeps none. Send "
        "the whole conversation in 'input'."
    )
    assert missing.value.body["code"] == "LM-2004"
    assert anonymous.status_code == 401
    assert api.stub.vendor_calls() == []


def test_what_cannot_be_translated_or_paid_for_is_refused_before_the_vendor(api):
    tenant = api.tenant()
    client = api.openai(tenant)

    with pytest.raises(openai.BadRequestError) as reference:
        client.responses.create(
            model="claude-3-5-haiku",
            input=[{"role": "user", "content": QUESTION}, {"type": "item_reference", "id": "x"}],
        )
    with pytest.raises(openai.BadRequestError) as server_tool:
        client.responses.create(model="gpt-4o-mini", input=QUESTION, tools=[{"type": "web_search"}])

    assert reference.value.body["code"] == "LM-2001"
    assert "input[1]" in reference.value.body["message"]
    assert server_tool.value.body["message"] == (
        "'tools[0]' is billed by the vendor beyond tokens: Tollgate serves it on team keys only."
    )
    assert api.stub.vendor_calls() == []


# ---------------------------------------------------------------- what chat guarantees


def test_the_end_user_becomes_a_caller_label_on_every_vendor_kind(api):
    tenant = api.tenant()
    client = api.openai(tenant)

    for model, _, _ in VENDORS:
        client.responses.create(model=model, input=QUESTION, safety_identifier="alice@example")

    native, chat, anthropic_call = (c["body"] for c in api.stub.vendor_calls())
    rows = settled(tenant, 3)
    label = rows[0].caller_label
    assert label and {r.caller_label for r in rows} == {label}
    assert native["safety_identifier"] == label
    assert chat["user"] == label
    assert anthropic_call["metadata"] == {"user_id": label}
    assert "alice@example" not in json.dumps([native, chat, anthropic_call])


def test_a_fallback_route_crosses_shapes_and_bills_the_model_that_served(api):
    tenant = api.tenant()
    api.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}})

    response = api.openai(tenant).responses.create(
        model="gpt-4o-mini,claude-3-5-haiku", input=QUESTION
    )

    assert (response.model, response.output_text) == (
        "claude-3-5-haiku",
        words("claude-3-5-haiku-latest"),
    )
    assert [c["path"] for c in api.stub.vendor_calls()] == [
        "/v1/responses",
        "/v1/responses",
        "/v1/messages",
    ]
    [row] = settled(tenant, 1)
    assert_billed(row, "claude-3-5-haiku", 6, 8)


def test_team_keys_serve_unbilled_and_an_exhausted_pool_locks_the_chain(api):
    tenant = api.tenant()
    team_keys(api, tenant, "stub-openai", ["sk-team-resp"])  # fallback off
    client = api.openai(tenant)

    served = client.responses.create(model="gpt-4o-mini", input=QUESTION)
    api.stub.faults({"kind": "429", "retry_after": 60, "match": {"key": "sk-team-resp"}})
    with pytest.raises(openai.RateLimitError) as refused:
        client.responses.create(model="gpt-4o-mini,claude-3-5-haiku", input=QUESTION)

    assert served.usage.output_tokens == 8
    assert refused.value.body["code"] == "LM-3021"
    assert [(c["path"], c["key"]) for c in api.stub.vendor_calls()] == [
        ("/v1/responses", "sk-team-resp"),
        ("/v1/responses", "sk-team-resp"),
    ]
    rows = settled(tenant, 2)
    assert [(r.served_by, r.byok_tokens_out, r.provider_cost_micro) for r in rows] == [
        ("team", 8, 0),
        ("", 0, 0),
    ]
    assert Group.objects.get(pk=tenant.group_id).spent_micro == rows[0].bandwidth_charge_micro


def test_nothing_is_retried_after_the_first_streamed_event(api):
    tenant = api.tenant()
    api.stub.faults({"kind": "fail_after_tokens", "after_tokens": 3})

    deltas: list[str] = []
    stream = api.openai(tenant).responses.stream(model="gpt-4o-mini", input=QUESTION)
    with pytest.raises(openai.APIError) as broke, stream as events:
        for event in events:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)

    assert broke.value.body["code"] == "LM-5001"
    assert deltas == ["Hello", " from", " the"]
    assert len(api.stub.vendor_calls()) == 1
    [row] = settled(tenant, 1)
    # Cut before its usage: the prompt's bound and one token per generated event received.
    assert (row.status, row.error_code, row.tokens_out) == (502, "LM-5001", 3)


def test_an_idempotency_key_replays_a_stream_byte_for_byte(api):
    tenant = api.tenant()
    headers = {"Authorization": f"Bearer {tenant.api_key}", "Idempotency-Key": "resp-once-1"}
    body = {"model": "claude-3-5-haiku", "input": QUESTION, "stream": True}

    first = httpx.post(f"{api.url}/v1/responses", headers=headers, json=body)
    again = httpx.post(f"{api.url}/v1/responses", headers=headers, json=body)

    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert b"event: response.completed" in first.content
    assert len(api.stub.vendor_calls()) == 1
    [row] = settled(tenant, 1)
    # Bytes metered as on chat: the body read and every event written.
    assert (row.bytes_in, row.bytes_out) == (len(first.request.content), len(first.content))


def test_the_group_concurrency_cap_holds_responses_streams(api):
    tenant = api.tenant()
    Group.objects.filter(pk=tenant.group_id).update(concurrency_limit=2)
    api.stub.faults({"kind": "slow", "delay_ms": 150, "times": 50})

    async def six() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=20, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"{api.url}/v1/responses",
                        headers={"Authorization": f"Bearer {tenant.api_key}"},
                        json={"model": "gpt-4o-mini", "input": QUESTION, "stream": True},
                    )
                    for _ in range(6)
                )
            )

    responses = asyncio.run(six())

    codes = sorted(
        (r.status_code, None if r.status_code == 200 else r.json()["error"]["code"])
        for r in responses
    )
    assert codes == [(200, None)] * 2 + [(429, "LM-3003")] * 4
    assert len(api.stub.vendor_calls()) == 2
