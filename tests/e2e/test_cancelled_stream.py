"""A client that closes a stream after a few tokens is billed exactly what it was sent: the
output tokens the gateway forwarded before it left, plus the prompt, at the profile's prices,
on the usage row, the wallet and the group's counters. The official SDKs (openai on
/v1/chat/completions, anthropic on /v1/messages) leave mid-answer; the stub vendor speaks
slowly (300 ms before each token), so what was forwarded is exactly what the client read.

The prompt's tokens are the vendor's own count when it told them before the cut (Anthropic's
`message_start` does); an OpenAI-shaped vendor tells its usage only in its last chunk, so a
stream cut before it is billed the prompt's upper bound (`prompt_bound`, what the hold
assumed), never less than the vendor bills.
"""

from __future__ import annotations

import pytest

from accounts.models import Group
from billing.models import Wallet
from core.money import TokenPrices
from gateway.plan import prompt_bound
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from tests.support.profiles import install_profiles
from tests.support.usage import settled

WALLET = 10_000_000
HELLO = [{"role": "user", "content": "hello there"}]
HELLO_TOKENS = 2  # the stub counts the words of the prompt
HELLO_BOUND = 27  # the prompt's bound: 11 bytes + 8 per message + 8 (core.money)
DELIVERED = 3  # the client reads three tokens of the stub's eight, then closes the stream
SLOW = {"kind": "slow", "delay_ms": 300}
# 1 micro-USD per input token and 10 per output token: every token shows in the cost.
PRICES = {"input_micro_per_mtok": 1_000_000, "output_micro_per_mtok": 10_000_000}
MAX_TOKENS = 100


def cut_profiles(stub_url: str) -> list[dict]:
    """One model on each vendor shape, at prices where each token is a whole micro-USD."""
    return [
        {
            "name": "cut-openai",
            "kind": "openai",
            "base_url": f"{stub_url}/v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [{"name": "cut-gpt", "upstream": "gpt-4o-mini", **PRICES}],
        },
        {
            "name": "cut-anthropic",
            "kind": "anthropic",
            "base_url": stub_url,
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [{"name": "cut-claude", "upstream": "claude-3-5-haiku-latest", **PRICES}],
        },
    ]


def leave_chat_stream(stack, tenant, model: str) -> tuple[int, dict]:
    """Stream a chat completion with the openai SDK, close it after DELIVERED tokens; return
    the tokens read and the body the gateway parsed."""
    body = {"model": model, "messages": HELLO, "max_tokens": MAX_TOKENS, "stream": True}
    read = 0
    with stack.openai(tenant).chat.completions.create(**body) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                read += 1
                if read == DELIVERED:
                    break
    return read, body


def leave_messages_stream(stack, tenant, model: str) -> tuple[int, dict]:
    """Stream a message with the anthropic SDK, close it after DELIVERED tokens."""
    body = {"model": model, "messages": HELLO, "max_tokens": MAX_TOKENS, "stream": True}
    read = 0
    with stack.anthropic(tenant).messages.create(**body) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                read += 1
                if read == DELIVERED:
                    break
    return read, body


CLIENTS = {
    "chat": (leave_chat_stream, openai_shape.parse_request),
    "messages": (leave_messages_stream, anthropic_shape.parse_request),
}


@pytest.mark.parametrize(
    ("route", "model", "vendor_told_prompt"),
    [
        ("chat", "cut-gpt", False),
        ("chat", "cut-claude", True),  # translated onto Anthropic, which tells the prompt first
        ("messages", "cut-claude", True),
        ("messages", "cut-gpt", False),  # translated onto OpenAI, which tells it last
    ],
)
def test_a_stream_the_client_closes_is_billed_its_delivered_output_and_its_prompt(
    stack, route, model, vendor_told_prompt
):
    install_profiles(stack.stub.url, cut_profiles(stack.stub.url))
    stack.gateway.reload()
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    stack.stub.faults(SLOW)
    leave, parse = CLIENTS[route]

    read, body = leave(stack, tenant, model)

    assert read == DELIVERED
    assert prompt_bound(parse(body)) == HELLO_BOUND
    tokens_in = HELLO_TOKENS if vendor_told_prompt else HELLO_BOUND
    cost = tokens_in * 1 + DELIVERED * 10
    assert cost == TokenPrices.configured(**PRICES).cost_micro(
        tokens_in=tokens_in, tokens_out=DELIVERED
    )
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.streamed, row.served_by) == (
        499,
        "client_closed",
        True,
        "platform",
    )
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (tokens_in, DELIVERED, cost)
    assert row.bandwidth_charge_micro == 0  # the group's rate is 0: tokens are the whole bill
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (cost, cost, 0)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET - cost, 0)
    [call] = stack.stub.vendor_calls()
    assert call["stream"] is True
