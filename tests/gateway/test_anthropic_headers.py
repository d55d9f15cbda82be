"""Anthropic's own headers on /v1/messages: `request-id` (the gateway's id, as the usage rows
have it: the anthropic SDK's `_request_id`) and `anthropic-ratelimit-*` with Anthropic's names
and formats (reset: the RFC 3339 time the window ends), `retry-after` on a 429. OpenAI's
`x-ratelimit-*` names stay on /v1/chat/completions, and only there.

The gateway starts in a fresh rate window (tests.support.rates) so its end is known exactly.
Each answer below uses 3 prompt + 8 answer tokens (the stub's rule).
"""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from accounts.models import ApiKey
from tests.support.usage import usage_rows

PROMPT = [{"role": "user", "content": "one two three"}]
RPM, TPM = 4, 1_000


def rfc3339(unix_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def ratelimit(headers, prefix: str) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name.startswith(prefix)}


@pytest.fixture
def limited(fresh_window_stack):
    tenant = fresh_window_stack.tenant()
    ApiKey.objects.filter(pk=tenant.api_key_id).update(rpm_limit=RPM, tpm_limit=TPM)
    return fresh_window_stack, tenant


def test_messages_answer_with_anthropics_request_id_and_rate_limit_headers(limited, rate_window):
    stack, tenant = limited
    client = anthropic.Anthropic(base_url=stack.url, api_key=tenant.api_key)
    reset = rfc3339(rate_window.epoch_s + 60)  # the end of the fleet's first window

    raw = client.messages.with_raw_response.create(
        model="claude-3-5-haiku", max_tokens=100, messages=PROMPT
    )
    message = raw.parse()
    streamed = client.messages.with_raw_response.create(
        model="claude-3-5-haiku", max_tokens=100, messages=PROMPT, stream=True
    )
    events = [event.type for event in streamed.parse()]
    chat = openai.OpenAI(
        base_url=f"{stack.url}/v1", api_key=tenant.api_key
    ).chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=PROMPT)

    assert message.usage.input_tokens + message.usage.output_tokens == 11
    assert events[-1] == "message_stop"
    rows = usage_rows([r.headers["x-tollgate-request-id"] for r in (raw, streamed, chat)], expect=3)
    ids = {row.request_id for row in rows}
    # Anthropic's request-id is the gateway's own id: the one the usage rows are keyed by.
    assert message._request_id == raw.headers["request-id"] == raw.headers["x-tollgate-request-id"]
    assert streamed.headers["request-id"] == streamed.headers["x-tollgate-request-id"]
    assert {raw.headers["request-id"], streamed.headers["request-id"]} < ids
    assert ratelimit(raw.headers, "anthropic-ratelimit-") == {
        "anthropic-ratelimit-requests-limit": "4",
        "anthropic-ratelimit-requests-remaining": "3",
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-tokens-limit": "1000",
        "anthropic-ratelimit-tokens-remaining": "989",  # 1000 - this answer's 11
        "anthropic-ratelimit-tokens-reset": reset,
    }
    assert ratelimit(streamed.headers, "anthropic-ratelimit-") == {
        "anthropic-ratelimit-requests-limit": "4",
        "anthropic-ratelimit-requests-remaining": "2",
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-tokens-limit": "1000",
        "anthropic-ratelimit-tokens-remaining": "989",  # known before it ran: the first's 11
        "anthropic-ratelimit-tokens-reset": reset,
    }
    for answer in (raw, streamed):
        assert ratelimit(answer.headers, "x-ratelimit-") == {}
    # Chat completions keep OpenAI's names and formats, and no Anthropic header.
    chat_reset = chat.headers["x-ratelimit-reset-requests"]
    assert ratelimit(chat.headers, "x-ratelimit-") == {
        "x-ratelimit-limit-requests": "4",
        "x-ratelimit-remaining-requests": "1",
        "x-ratelimit-reset-requests": chat_reset,
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "967",  # 1000 - 11 - 11 - this answer's 11
        "x-ratelimit-reset-tokens": chat_reset,
    }
    assert 1 <= int(chat_reset.removesuffix("s")) <= 60
    assert ratelimit(chat.headers, "anthropic-") == {}
    assert "request-id" not in chat.headers


def test_a_rate_limited_message_says_when_in_retry_after_and_keeps_its_request_id(
    limited, rate_window
):
    stack, tenant = limited
    ApiKey.objects.filter(pk=tenant.api_key_id).update(rpm_limit=1)
    stack.gateway.reload()
    client = anthropic.Anthropic(base_url=stack.url, api_key=tenant.api_key, max_retries=0)
    client.messages.create(model="claude-3-5-haiku", max_tokens=100, messages=PROMPT)

    before = int(time.time())
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(model="claude-3-5-haiku", max_tokens=100, messages=PROMPT)
    after = int(time.time())

    headers = refused.value.response.headers
    window_end = rate_window.epoch_s + 60
    assert window_end - after <= int(headers["retry-after"]) <= window_end - before
    assert refused.value.body["error"]["code"] == "LM-3001"
    assert refused.value.request_id == headers["x-tollgate-request-id"]
    [row] = usage_rows([refused.value.request_id], expect=1)
    assert (row.status, row.error_code) == (429, "LM-3001")
    assert ratelimit(headers, "x-ratelimit-") == {}


def test_count_tokens_carries_the_request_id_too(limited):
    stack, tenant = limited
    client = anthropic.Anthropic(base_url=stack.url, api_key=tenant.api_key)

    counted = client.messages.with_raw_response.count_tokens(
        model="claude-3-5-haiku", messages=PROMPT
    )

    assert counted.parse().input_tokens == 3
    assert counted.headers["request-id"] == counted.headers["x-tollgate-request-id"]
