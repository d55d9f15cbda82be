"""Azure OpenAI profiles (kind `azure`) through a real gateway, driven by the official SDKs.

Two profiles on the stub: one on the deployment paths (api_version set: the model's
`upstream` is its deployment, in the path) and one on the v1 paths (the deployment as the
body's `model`). The stub sees Azure's path, api-version and `api-key`; tokens and the cost
recorded are exact; Azure's content filter reaches the client: a refused prompt as the
vendor's 400 with its message after one call, a filtered answer as its finish reason.
"""

from __future__ import annotations

import openai
import pytest

from core.money import TokenPrices
from stubvendor.azure import FILTERED_PROMPT
from tests.support.profiles import PLATFORM_KEY
from tests.support.stacks import own_stack
from tests.support.usage import settled

VERSION = "2024-10-21"
CHAT_PRICES = {"input_micro_per_mtok": 3_000_000, "output_micro_per_mtok": 12_000_000}
EMBED_PRICE = 1_000_000
PROMPT = [{"role": "user", "content": "two words"}]  # 2 prompt tokens; the answer: 8 words
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def azure_profiles(stub_url: str) -> list[dict]:
    return [
        {
            "name": "azure-dep",
            "kind": "azure",
            "base_url": f"{stub_url}/res-dep",
            "api_version": VERSION,
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {"name": "az-mini", "upstream": "prod-mini", **CHAT_PRICES},
                {
                    "name": "az-embed",
                    "kind": "embedding",
                    "upstream": "embed-deploy",
                    "input_micro_per_mtok": EMBED_PRICE,
                    "output_micro_per_mtok": 0,
                },
            ],
        },
        {
            "name": "azure-v1",
            "kind": "azure",
            "base_url": f"{stub_url}/res-v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [{"name": "az-v1-mini", "upstream": "v1-mini", **CHAT_PRICES}],
        },
    ]


@pytest.fixture(scope="module")
def azure_gateway(module_gateways):
    return module_gateways()


@pytest.fixture
def astack(transactional_db, azure_gateway, stub):
    return own_stack(azure_gateway, stub, azure_profiles(stub.url))


def cost(tokens_in: int, tokens_out: int) -> int:
    return TokenPrices.configured(**CHAT_PRICES).cost_micro(
        tokens_in=tokens_in, tokens_out=tokens_out
    )


def answer(deployment: str) -> str:
    return f"Hello from the stub model {deployment} reply ok"


def seen(stack) -> list[tuple]:
    """What the stub received of each call: path, api-version, key, model, stream."""
    return [
        (c["path"], c["api_version"], c["key"], c["model"], c["stream"])
        for c in stack.stub.vendor_calls()
    ]


def books(rows) -> list[tuple]:
    return [
        (r.provider, r.model_served, r.tokens_in, r.tokens_out, r.provider_cost_micro) for r in rows
    ]


DEP_CHAT = ("/res-dep/openai/deployments/prod-mini/chat/completions", VERSION, PLATFORM_KEY)


def test_openai_chat_whole_streamed_and_with_tools_on_the_deployment_path(astack):
    tenant = astack.tenant()
    client = astack.openai(tenant)

    whole = client.chat.completions.create(model="az-mini", messages=PROMPT)
    streamed = list(
        client.chat.completions.create(
            model="az-mini",
            messages=PROMPT,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    tools = client.chat.completions.create(model="az-mini", messages=PROMPT, tools=[WEATHER])

    assert (whole.choices[0].message.content, whole.choices[0].finish_reason) == (
        answer("prod-mini"),
        "stop",
    )
    assert (whole.model, whole.usage.prompt_tokens, whole.usage.completion_tokens) == (
        "az-mini",
        2,
        8,
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == answer("prod-mini")
    assert [c.choices[0].finish_reason for c in streamed if c.choices][-1] == "stop"
    assert (streamed[-1].usage.prompt_tokens, streamed[-1].usage.completion_tokens) == (2, 8)
    [call] = tools.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("weather", '{"city":"stub"}')
    assert tools.choices[0].finish_reason == "tool_calls"

    assert seen(astack) == [
        (*DEP_CHAT, "prod-mini", False),
        (*DEP_CHAT, "prod-mini", True),
        (*DEP_CHAT, "prod-mini", False),
    ]
    body = astack.stub.vendor_calls()[0]["body"]
    assert (body["model"], body["max_completion_tokens"]) == ("prod-mini", 4096)
    assert "max_tokens" not in body
    assert books(settled(tenant, 3)) == [
        ("azure-dep", "az-mini", 2, 8, cost(2, 8)),
        ("azure-dep", "az-mini", 2, 8, cost(2, 8)),
        ("azure-dep", "az-mini", 12, 5, cost(12, 5)),  # a tool: +10 prompt; a call: 5 out
    ]


def test_openai_responses_whole_and_streamed_and_embeddings(astack):
    tenant = astack.tenant()
    client = astack.openai(tenant)

    whole = client.responses.create(model="az-mini", input="two words")
    with client.responses.stream(model="az-mini", input="two words") as stream:
        final = stream.get_final_response()
    vectors = client.embeddings.create(model="az-embed", input=["one two three", "four"])

    assert whole.output_text == final.output_text == answer("prod-mini")
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (2, 8)
    assert (final.usage.input_tokens, final.usage.output_tokens) == (2, 8)
    assert ([d.index for d in vectors.data], vectors.usage.prompt_tokens) == ([0, 1], 4)
    responses = ("/res-dep/openai/responses", VERSION, PLATFORM_KEY, "prod-mini")
    assert seen(astack) == [
        (*responses, False),
        (*responses, True),
        (
            "/res-dep/openai/deployments/embed-deploy/embeddings",
            VERSION,
            PLATFORM_KEY,
            "embed-deploy",
            False,
        ),
    ]
    assert astack.stub.vendor_calls()[0]["body"]["model"] == "prod-mini"
    embed_cost = TokenPrices.configured(
        input_micro_per_mtok=EMBED_PRICE, output_micro_per_mtok=0
    ).cost_micro(tokens_in=4, tokens_out=0)
    assert books(settled(tenant, 3)) == [
        ("azure-dep", "az-mini", 2, 8, cost(2, 8)),
        ("azure-dep", "az-mini", 2, 8, cost(2, 8)),
        ("azure-dep", "az-embed", 4, 0, embed_cost),
    ]


def test_anthropic_messages_whole_and_streamed_on_an_azure_model(astack):
    tenant = astack.tenant()
    client = astack.anthropic(tenant)

    whole = client.messages.create(model="az-mini", max_tokens=100, messages=PROMPT)
    with client.messages.stream(model="az-mini", max_tokens=100, messages=PROMPT) as stream:
        final = stream.get_final_message()

    for message in (whole, final):
        assert (message.content[0].text, message.stop_reason) == (answer("prod-mini"), "end_turn")
        assert (message.usage.input_tokens, message.usage.output_tokens) == (2, 8)
    assert seen(astack) == [(*DEP_CHAT, "prod-mini", False), (*DEP_CHAT, "prod-mini", True)]
    assert books(settled(tenant, 2)) == [("azure-dep", "az-mini", 2, 8, cost(2, 8))] * 2


def test_the_v1_profile_calls_the_v1_path_with_the_deployment_as_model(astack):
    tenant = astack.tenant()
    client = astack.openai(tenant)

    whole = client.chat.completions.create(model="az-v1-mini", messages=PROMPT)
    streamed = list(
        client.chat.completions.create(model="az-v1-mini", messages=PROMPT, stream=True)
    )
    response = client.responses.create(model="az-v1-mini", input="two words")

    assert whole.choices[0].message.content == answer("v1-mini")
    # Azure's first chunk (filter annotations, no choices) is not passed on.
    assert all(c.choices and c.object == "chat.completion.chunk" for c in streamed)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == answer(
        "v1-mini"
    )
    assert response.output_text == answer("v1-mini")
    chat = ("/res-v1/openai/v1/chat/completions", None, PLATFORM_KEY, "v1-mini")
    assert seen(astack) == [
        (*chat, False),
        (*chat, True),
        ("/res-v1/openai/v1/responses", None, PLATFORM_KEY, "v1-mini", False),
    ]
    assert books(settled(tenant, 3)) == [("azure-v1", "az-v1-mini", 2, 8, cost(2, 8))] * 3


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_filtered_prompt_reaches_the_openai_sdk_as_the_vendors_400_after_one_call(astack, stream):
    tenant = astack.tenant()
    # The SDK as applications run it (2 retries): a retryable answer would show here.
    client = openai.OpenAI(base_url=f"{astack.url}/v1", api_key=tenant.api_key)
    prompt = [{"role": "user", "content": "please FILTERME now"}]

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="az-mini", messages=prompt, stream=stream)

    assert refused.value.status_code == 400
    assert refused.value.body == {
        "message": f"The upstream provider refused the request (HTTP 400): {FILTERED_PROMPT}",
        "type": "invalid_request_error",
        "code": "LM-2002",
    }
    [call] = astack.stub.vendor_calls()
    assert (call["status"], call["model"], call["key"]) == (400, "prod-mini", PLATFORM_KEY)
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.provider_cost_micro) == (400, "LM-2002", 0)


def test_a_filtered_answer_ends_as_content_filter_for_openai_and_refusal_for_anthropic(astack):
    tenant = astack.tenant()
    prompt = [{"role": "user", "content": "FILTERANSWER"}]
    oa, an = astack.openai(tenant), astack.anthropic(tenant)

    whole = oa.chat.completions.create(model="az-mini", messages=prompt)
    chunks = list(oa.chat.completions.create(model="az-mini", messages=prompt, stream=True))
    message = an.messages.create(model="az-mini", max_tokens=100, messages=prompt)
    with an.messages.stream(model="az-mini", max_tokens=100, messages=prompt) as stream:
        final = stream.get_final_message()

    assert whole.choices[0].finish_reason == "content_filter"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "content_filter"
    assert (message.stop_reason, final.stop_reason) == ("refusal", "refusal")
    assert message.content[0].text == final.content[0].text == answer("prod-mini")
    assert books(settled(tenant, 4)) == [("azure-dep", "az-mini", 1, 8, cost(1, 8))] * 4
