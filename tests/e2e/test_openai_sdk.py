"""The first proxied completion: the official openai SDK through a real gateway process."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.profiles import PLATFORM_KEY
from tests.support.usage import usage_rows

ANSWER = "Hello from the stub model gpt-4o-mini reply ok"
PROMPT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hello to the gateway"},
]
PROMPT_WORDS = 2 + 5  # the stub counts whitespace-separated words of every message


def test_non_streamed_completion_reaches_the_stub_with_the_platform_key(stack):
    tenant = stack.tenant()
    client = stack.openai(tenant)

    response = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=PROMPT, max_tokens=50
    )
    completion = response.parse()

    assert completion.choices[0].message.content == ANSWER
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == PROMPT_WORDS
    assert completion.usage.completion_tokens == 8
    calls = stack.stub.vendor_calls()
    assert [(c["path"], c["model"], c["key"], c["stream"]) for c in calls] == [
        ("/v1/chat/completions", "gpt-4o-mini", PLATFORM_KEY, False)
    ]
    request_id = response.headers["x-request-id"]
    [row] = usage_rows([request_id], expect=1)
    assert (row.tokens_in, row.tokens_out, row.served_by, row.provider) == (
        PROMPT_WORDS,
        8,
        "platform",
        "stub-openai",
    )
    # 7 x 0.15 + 8 x 0.60 = 5.85 micro-USD, rounded up.
    assert row.provider_cost_micro == 6
    assert row.status == 200 and row.streamed is False


def test_streamed_completion_with_usage(stack):
    tenant = stack.tenant()
    client = stack.openai(tenant)

    chunks = list(
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=PROMPT,
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    assert chunks[-1].usage.prompt_tokens == PROMPT_WORDS
    assert chunks[-1].usage.completion_tokens == 8
    [call] = stack.stub.vendor_calls()
    assert call["stream"] is True and call["key"] == PLATFORM_KEY
    rows = usage_rows(group_id=tenant.group_id, expect=1)
    assert [(r.streamed, r.tokens_out, r.status) for r in rows] == [(True, 8, 200)]
    assert rows[0].ttft_ms is not None


def test_streamed_completion_without_usage_request_has_no_usage_chunk(stack):
    client = stack.openai(stack.tenant())

    chunks = list(client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT, stream=True))

    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ANSWER


def test_x_api_key_header_authenticates_too(stack):
    tenant = stack.tenant()

    response = httpx.post(
        f"{stack.url}/v1/chat/completions",
        headers={"x-api-key": tenant.api_key},
        json={"model": "gpt-4o-mini", "messages": PROMPT},
    )

    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 8


def test_models_lists_what_the_key_may_use(stack):
    from accounts.models import ApiKey

    tenant = stack.tenant()
    names = [m.id for m in stack.openai(tenant).models.list()]
    assert names == ["claude-3-5-haiku", "gpt-4o", "gpt-4o-mini", "router-mini"]

    ApiKey.objects.filter(pk=tenant.api_key_id).update(allowed_models=["gpt-4o-mini"])
    stack.gateway.reload()
    assert [m.id for m in stack.openai(tenant).models.list()] == ["gpt-4o-mini"]
    with pytest.raises(openai.PermissionDeniedError) as refused:
        stack.openai(tenant).chat.completions.create(model="gpt-4o", messages=PROMPT)
    assert refused.value.body["code"] == "LM-1003"
    assert stack.stub.vendor_calls() == []
