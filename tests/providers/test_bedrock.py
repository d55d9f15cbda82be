"""A `bedrock` profile end to end: a real gateway signs Converse calls to the stub (which
checks each SigV4 signature), driven by the official OpenAI SDK (chat whole and streamed,
tools, Responses whole and streamed) and Anthropic SDK (messages whole and streamed); exact
usage and cost; wrong credentials meet the stub's 403 after one call.

The stub counts a prompt's words (3 for PROMPT) plus 10 per tool, and answers the 8 words
"Hello from the stub model <upstream id> reply ok" (a tool call: 5 output tokens).
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from providers.models import ProviderProfile
from providers.services import profile_set_platform_key
from stubvendor.bedrock_signing import TEST_CREDENTIALS
from tests.support.profiles import install_profiles, stub_profiles
from tests.support.services import clear_shared_state
from tests.support.stacks import Stack
from tests.support.usage import settled

AKID = TEST_CREDENTIALS.split(":")[0]
UPSTREAM = "anthropic.claude-3-5-sonnet-20240620-v1:0"
MODEL = "bedrock-sonnet"
WRONG_MODEL = "bedrock-wrong"
WRONG_KEY_ENV = "TG_TEST_BEDROCK_WRONG_KEY"
PROMPT = "Say hello please"
ANSWER = f"Hello from the stub model {UPSTREAM} reply ok"
IN_PRICE, OUT_PRICE = 3_000_000, 15_000_000  # micro-USD per million tokens
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}


def cost_micro(tokens_in: int, tokens_out: int) -> int:
    return -(-(tokens_in * IN_PRICE + tokens_out * OUT_PRICE) // 1_000_000)


def bedrock_profile(stub_url: str, name: str, model: str, **fields) -> dict:
    return {
        "name": name,
        "kind": "bedrock",
        "base_url": stub_url,
        "region": "us-east-1",
        "timeout_s": 5,
        "stream_idle_timeout_s": 2,
        "models": [
            {
                "name": model,
                "upstream": UPSTREAM,
                "input_micro_per_mtok": IN_PRICE,
                "output_micro_per_mtok": OUT_PRICE,
            }
        ],
        **fields,
    }


@pytest.fixture(scope="module")
def bedrock_gateway(module_gateways):
    # The wrong profile's key comes from the environment; the good one's is sealed.
    return module_gateways(**{WRONG_KEY_ENV: f"{AKID}:not-the-secret"})


@pytest.fixture
def bstack(transactional_db, bedrock_gateway, stub) -> Stack:
    stub.clear()
    clear_shared_state()
    install_profiles(
        stub.url,
        [
            *stub_profiles(stub.url),
            bedrock_profile(stub.url, "stub-bedrock", MODEL),
            bedrock_profile(stub.url, "stub-bedrock-wrong", WRONG_MODEL, api_key_env=WRONG_KEY_ENV),
        ],
    )
    profile = ProviderProfile.objects.get(name="stub-bedrock")
    profile_set_platform_key(profile=profile, api_key=TEST_CREDENTIALS)
    profile.save()
    bedrock_gateway.reload()
    return Stack(gateway=bedrock_gateway, stub=stub)


def the_call(stack: Stack) -> dict:
    """The one vendor call the stub saw: signed with the test key for us-east-1."""
    [call] = stack.stub.vendor_calls()
    assert (call["model"], call["key"], call["region"], call["status"]) == (
        UPSTREAM,
        AKID,
        "us-east-1",
        200,
    )
    return call


def billed(tenant, tokens_in: int, tokens_out: int, *, streamed: bool) -> None:
    [row] = settled(tenant, 1)
    assert (row.provider, row.model_served, row.status, row.streamed) == (
        "stub-bedrock",
        MODEL,
        200,
        streamed,
    )
    assert (row.tokens_in, row.tokens_out) == (tokens_in, tokens_out)
    assert row.provider_cost_micro == cost_micro(tokens_in, tokens_out)


# ---------------------------------------------------------------- OpenAI chat


def test_openai_chat_is_answered_through_a_signed_converse_call(bstack):
    tenant = bstack.tenant()

    answer = bstack.openai(tenant).chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be kind"}, {"role": "user", "content": PROMPT}],
        temperature=0.2,
    )

    assert answer.choices[0].message.content == ANSWER
    assert answer.choices[0].finish_reason == "stop"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (5, 8)
    assert answer.model == MODEL
    body = the_call(bstack)["body"]
    assert body["system"] == [{"text": "Be kind"}]
    assert body["inferenceConfig"] == {"temperature": 0.2, "maxTokens": 4096}
    assert cost_micro(5, 8) == 135
    billed(tenant, 5, 8, streamed=False)


def test_openai_chat_streams_from_converse_stream(bstack):
    tenant = bstack.tenant()

    stream = bstack.openai(tenant).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from the stub model"
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["length"]
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 5)
    assert the_call(bstack)["path"] == f"/model/{UPSTREAM}/converse-stream"
    billed(tenant, 3, 5, streamed=True)


def test_openai_tools_are_called_whole_and_streamed(bstack):
    tenant = bstack.tenant()
    client = bstack.openai(tenant)
    ask = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "tools": [WEATHER]}

    whole = client.chat.completions.create(**ask, tool_choice="required")
    streamed = list(client.chat.completions.create(**ask, stream=True))

    [call] = whole.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("weather", '{"city":"stub"}')
    assert call.id.startswith("tooluse_stub_")
    assert whole.choices[0].finish_reason == "tool_calls"
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (13, 5)
    fragments = [
        c.choices[0].delta.tool_calls[0].function.arguments or ""
        for c in streamed
        if c.choices and c.choices[0].delta.tool_calls
    ]
    assert "".join(fragments) == '{"city":"stub"}'
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
    first, second = bstack.stub.vendor_calls()
    spec = first["body"]["toolConfig"]["tools"][0]["toolSpec"]
    assert spec == {"name": "weather", "inputSchema": {"json": SCHEMA}}
    assert first["body"]["toolConfig"]["toolChoice"] == {"any": {}}
    rows = settled(tenant, 2)
    assert [(r.tokens_in, r.tokens_out, r.provider_cost_micro) for r in rows] == [
        (13, 5, cost_micro(13, 5))
    ] * 2


def test_a_field_converse_cannot_carry_is_refused_before_any_call(bstack):
    tenant = bstack.tenant()

    with pytest.raises(openai.BadRequestError) as refused:
        bstack.openai(tenant).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPT}], seed=7
        )

    assert refused.value.body["code"] == "LM-2001"
    assert refused.value.body["message"] == "'seed' cannot be translated for bedrock vendors."
    assert bstack.stub.vendor_calls() == []


# ---------------------------------------------------------------- Responses


def test_responses_whole_and_streamed_reach_converse(bstack):
    tenant = bstack.tenant()
    client = bstack.openai(tenant)

    whole = client.responses.create(model=MODEL, input=PROMPT)
    events = list(client.responses.create(model=MODEL, input=PROMPT, stream=True))

    assert whole.output_text == ANSWER
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (3, 8)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == ANSWER
    completed = events[-1]
    assert completed.type == "response.completed"
    assert (completed.response.usage.input_tokens, completed.response.usage.output_tokens) == (3, 8)
    assert [c["path"].rsplit("/", 1)[1] for c in bstack.stub.vendor_calls()] == [
        "converse",
        "converse-stream",
    ]
    assert [(r.tokens_in, r.tokens_out, r.streamed) for r in settled(tenant, 2)] == [
        (3, 8, False),
        (3, 8, True),
    ]


# ---------------------------------------------------------------- Anthropic


def test_anthropic_messages_whole_and_streamed_reach_converse(bstack):
    tenant = bstack.tenant()
    client = bstack.anthropic(tenant)
    ask = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": PROMPT}]}

    whole = client.messages.create(**ask, system="Be kind")
    with client.messages.stream(**ask) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert whole.content[0].text == ANSWER
    assert whole.stop_reason == "end_turn"
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (5, 8)
    assert streamed_text == ANSWER
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 8)
    first, second = bstack.stub.vendor_calls()
    assert first["body"]["inferenceConfig"] == {"maxTokens": 100}
    assert first["body"]["system"] == [{"text": "Be kind"}]
    rows = settled(tenant, 2)
    assert [(r.tokens_in, r.tokens_out, r.provider_cost_micro) for r in rows] == [
        (5, 8, cost_micro(5, 8)),
        (3, 8, cost_micro(3, 8)),
    ]


# ---------------------------------------------------------------- credentials


def test_wrong_credentials_meet_the_stubs_403_after_one_call(bstack):
    tenant = bstack.tenant()

    with pytest.raises(openai.APIStatusError) as failed:
        bstack.openai(tenant).chat.completions.create(
            model=WRONG_MODEL, messages=[{"role": "user", "content": PROMPT}]
        )

    assert failed.value.status_code == 502
    assert failed.value.body["message"] == "The upstream provider failed (HTTP 403)."
    [call] = bstack.stub.vendor_calls()
    assert (call["key"], call["status"], call["fault"]) == (AKID, 403, None)
    [row] = settled(tenant, 1)
    assert (row.status, row.tokens_in, row.provider_cost_micro) == (502, 0, 0)
    assert [a.upstream_status for a in row.attempts] == [403]


def test_the_anthropic_sdk_hears_of_a_throttled_stream_in_its_own_error(bstack):
    tenant = bstack.tenant()
    bstack.stub.faults({"kind": "429", "retry_after": 2, "times": 3})

    with pytest.raises(anthropic.RateLimitError):
        bstack.anthropic(tenant).messages.create(
            model=MODEL,
            max_tokens=50,
            messages=[{"role": "user", "content": PROMPT}],
            stream=True,
        )
