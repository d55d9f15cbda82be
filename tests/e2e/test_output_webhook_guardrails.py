"""Webhook guardrails on the answer, end to end: a real gateway, the stub vendor, the official
SDKs and a real endpoint on 127.0.0.1. A whole answer is sent to the endpoint before the
client sees it; a stream is held whole (the endpoint needs all of it), then sent at once, or
ended with LM-2030 and no text, billed at what the vendor said it used; an endpoint past its
deadline fails open and the answer is served, the row saying the check failed."""

from __future__ import annotations

import anthropic
import openai
import pytest

from billing.models import Wallet
from core.money import TokenPrices
from tests.e2e.test_output_guardrails import (
    ANSWER,
    HELLO,
    HELLO_TOKENS,
    PRICES,
    UPSTREAM,
    WALLET,
    chat_stream,
    messages_stream,
    output_profiles,
)
from tests.e2e.test_webhook_guardrails import webhook_guardrail
from tests.support.guardrail_receivers import FLAGGED, GuardrailReceiver, late
from tests.support.profiles import install_profiles
from tests.support.stacks import own_stack
from tests.support.usage import settled

CLAUDE_ANSWER = ANSWER.format(model=UPSTREAM["out-claude"])
VENDOR_COST = TokenPrices.configured(**PRICES).cost_micro(tokens_in=HELLO_TOKENS, tokens_out=8)


@pytest.fixture(scope="module")
def hook_gateway(module_gateways):
    return module_gateways(TOLLGATE_WEB_ALLOW_NETS="127.0.0.1/32")


@pytest.fixture
def guarded(transactional_db, hook_gateway, stub):
    stack = own_stack(hook_gateway, stub)
    install_profiles(stub.url, output_profiles(stub.url))
    stack.gateway.reload()
    return stack


@pytest.fixture
def hook():
    receiver = GuardrailReceiver()
    yield receiver
    receiver.close()


def tenant_with_hook(stack, hook, **fields):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    webhook_guardrail(tenant, hook, name="answer-check", phase="output", **fields)
    return tenant


def balance(tenant) -> tuple[int, int]:
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    return wallet.balance_micro, wallet.reserved_micro


def test_a_whole_answer_the_endpoint_flags_is_our_error_billed_as_the_vendor_billed(guarded, hook):
    tenant = tenant_with_hook(guarded, hook, action="block")
    hook.replies = [FLAGGED]

    with pytest.raises(anthropic.BadRequestError) as refused:
        guarded.anthropic(tenant).messages.create(
            model="out-claude", messages=HELLO, max_tokens=100
        )

    assert refused.value.body["error"]["message"] == (
        "Blocked by guardrail 'answer-check' (output): its endpoint flagged the answer."
    )
    [call] = hook.received
    request_id = refused.value.response.headers["x-request-id"]
    assert call.signed is True
    assert call.json == {
        "guardrail": "answer-check",
        "phase": "output",
        "request_id": request_id,
        "texts": [CLAUDE_ANSWER],
    }
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.tokens_in, row.tokens_out) == (
        400,
        "LM-2030",
        HELLO_TOKENS,
        8,
    )
    assert (row.provider_cost_micro, balance(tenant)) == (VENDOR_COST, (WALLET - VENDOR_COST, 0))
    assert row.guardrails == [
        {"guardrail": "answer-check", "phase": "output", "action": "block", "matches": 2}
    ]


def test_a_stream_is_held_whole_then_sent_when_the_endpoint_passes_it(guarded, hook):
    tenant = tenant_with_hook(guarded, hook, action="block")

    text, failed = messages_stream(guarded, tenant, "out-claude")

    assert (failed, text) == (None, CLAUDE_ANSWER)
    [call] = hook.received
    assert call.json["texts"] == [CLAUDE_ANSWER]
    [row] = settled(tenant, 1)
    assert (row.status, row.tokens_out, row.provider_cost_micro) == (200, 8, VENDOR_COST)
    assert row.guardrails == [
        {"guardrail": "answer-check", "phase": "output", "action": "block", "matches": 0}
    ]


def test_a_stream_the_endpoint_flags_ends_with_our_error_and_no_text(guarded, hook):
    tenant = tenant_with_hook(guarded, hook, action="block")
    hook.replies = [FLAGGED]

    text, failed = chat_stream(guarded, tenant, "out-claude")

    assert text == ""
    assert isinstance(failed, openai.APIError)
    assert failed.body["code"] == "LM-2030"
    assert failed.body["message"] == (
        "Blocked by guardrail 'answer-check' (output): its endpoint flagged the answer."
    )
    # Held whole, none of it sent: billed like a whole answer, at the vendor's own count.
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.streamed) == (400, "LM-2030", True)
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (
        HELLO_TOKENS,
        8,
        VENDOR_COST,
    )
    assert balance(tenant) == (WALLET - VENDOR_COST, 0)


def test_an_endpoint_past_its_deadline_fails_open_and_the_stream_is_served(guarded, hook):
    tenant = tenant_with_hook(guarded, hook, action="block", deadline_ms=300, fail_mode="open")
    hook.replies = [late(2.0)]

    text, failed = chat_stream(guarded, tenant, "out-claude")

    assert (failed, text) == (None, CLAUDE_ANSWER)
    [row] = settled(tenant, 1)
    assert (row.status, row.guardrails) == (
        200,
        [{"guardrail": "answer-check", "phase": "output", "action": "block", "matches": 0,
          "failed": True}],
    )  # fmt: skip
