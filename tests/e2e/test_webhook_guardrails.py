"""Webhook guardrails end to end: a real gateway, the stub vendor, the official OpenAI SDK and
a real endpoint on 127.0.0.1 (a thread of this process) that checks each call's signature as
a vendor would. A flag that blocks is LM-2030 with no vendor call and nothing billed; a clean
answer lets the request through; an endpoint past its deadline fails open (served, the usage
row saying the check failed) or closed (LM-2030, no vendor call), as the guardrail says.

The gateway allows 127.0.0.1 (TOLLGATE_WEB_ALLOW_NETS), as the suite's alert webhooks do: a
tenant's endpoint is checked and pinned like any other."""

from __future__ import annotations

import time

import openai
import pytest

from tests.alerts.conftest import allowing_loopback
from tests.support.guardrail_receivers import FLAGGED, GuardrailReceiver, late
from tests.support.metrics import metric
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows

PROMPT = "summarise the attached contract for ACME"


@pytest.fixture(scope="module")
def hook_gateway(module_gateways):
    return module_gateways(TOLLGATE_WEB_ALLOW_NETS="127.0.0.1/32")


@pytest.fixture
def stack(transactional_db, hook_gateway, stub):
    return own_stack(hook_gateway, stub)


@pytest.fixture
def hook():
    receiver = GuardrailReceiver()
    yield receiver
    receiver.close()


def webhook_guardrail(tenant, hook: GuardrailReceiver, *, phase: str = "input", **fields):
    """The account's own webhook guardrail, attached to the account; the hook learns its
    secret as the tenant would (from the answer that made it)."""
    from accounts.models import Account
    from guardrails import services

    account = Account.objects.get(pk=tenant.account_id)
    with allowing_loopback():
        made, secret = services.guardrail_create(
            account=account, kind="webhook", webhook_url=hook.url, phase=phase, **fields
        )
    services.attachment_create(guardrail=made, account=account)
    assert secret is not None  # a webhook guardrail is made with its signing secret
    hook.secret = secret
    return made


def wallet(tenant) -> tuple[int, int]:
    from billing.models import Wallet

    w = Wallet.objects.get(account_id=tenant.account_id)
    return w.balance_micro, w.reserved_micro


def verdicts(stack, action: str, result: str) -> float:
    return metric(
        stack.url, "tollgate_guardrail_verdicts_total",
        kind="webhook", phase="input", action=action, result=result,
    )  # fmt: skip


def ask(stack, tenant):
    return stack.openai(tenant).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}]
    )


def refused(stack, tenant) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(stack, tenant)
    return caught.value


def test_a_flag_that_blocks_reaches_no_vendor_and_costs_nothing(stack, hook):
    tenant = stack.tenant()
    webhook_guardrail(tenant, hook, name="vendor-check", action="block")
    before = wallet(tenant), verdicts(stack, "block", "matched")
    hook.replies = [FLAGGED]

    error = refused(stack, tenant)

    assert (error.body["code"], error.body["message"]) == (
        "LM-2030",
        "Blocked by guardrail 'vendor-check' (input): its endpoint flagged the request.",
    )
    request_id = error.response.headers["x-request-id"]
    [call] = hook.received
    assert call.signed is True
    assert call.json == {
        "guardrail": "vendor-check",
        "phase": "input",
        "request_id": request_id,
        "texts": [PROMPT],
    }
    [row] = usage_rows([request_id], expect=1)
    assert (row.status, row.error_code, row.provider_cost_micro, row.upstream_sent) == (
        400,
        "LM-2030",
        0,
        False,
    )
    assert row.guardrails == [
        {"guardrail": "vendor-check", "phase": "input", "action": "block", "matches": 2}
    ]
    assert stack.stub.vendor_calls() == []
    assert (wallet(tenant), verdicts(stack, "block", "matched")) == (before[0], before[1] + 1)


def test_a_clean_answer_lets_the_request_through(stack, hook):
    tenant = stack.tenant()
    webhook_guardrail(tenant, hook, name="vendor-check", action="block")
    clean = verdicts(stack, "block", "clean")

    raw = ask(stack, tenant)

    assert raw.parse().choices[0].message.content
    [call] = hook.received
    assert (call.signed, call.json["texts"]) == (True, [PROMPT])
    [vendor_call] = stack.stub.vendor_calls()
    assert vendor_call["body"]["messages"] == [{"role": "user", "content": PROMPT}]
    [row] = usage_rows([raw.headers["x-request-id"]], expect=1)
    assert (row.status, row.guardrails) == (
        200,
        [{"guardrail": "vendor-check", "phase": "input", "action": "block", "matches": 0}],
    )
    assert verdicts(stack, "block", "clean") == clean + 1


def test_a_flagging_guardrail_records_the_flag_and_serves_the_prompt(stack, hook):
    tenant = stack.tenant()
    webhook_guardrail(tenant, hook, name="vendor-flag", action="flag")
    hook.replies = [FLAGGED]

    raw = ask(stack, tenant)

    assert raw.parse().choices[0].message.content
    assert len(stack.stub.vendor_calls()) == 1
    [row] = usage_rows([raw.headers["x-request-id"]], expect=1)
    assert row.guardrails == [
        {"guardrail": "vendor-flag", "phase": "input", "action": "flag", "matches": 2}
    ]


def test_a_late_endpoint_failing_open_serves_the_request_and_the_row_says_it_failed(stack, hook):
    tenant = stack.tenant()
    webhook_guardrail(
        tenant, hook, name="slow-check", action="block", deadline_ms=300, fail_mode="open"
    )
    failed = verdicts(stack, "block", "failed")
    hook.replies = [late(2.0)]

    started = time.monotonic()
    raw = ask(stack, tenant)
    waited = time.monotonic() - started

    assert raw.parse().choices[0].message.content
    assert 0.3 <= waited < 2.0  # the gateway stopped waiting at the deadline
    assert len(hook.received) == 1
    assert len(stack.stub.vendor_calls()) == 1
    [row] = usage_rows([raw.headers["x-request-id"]], expect=1)
    assert (row.status, row.guardrails) == (
        200,
        [
            {
                "guardrail": "slow-check",
                "phase": "input",
                "action": "block",
                "matches": 0,
                "failed": True,
            }
        ],
    )
    assert verdicts(stack, "block", "failed") == failed + 1


def test_a_late_endpoint_failing_closed_is_lm_2030_and_reaches_no_vendor(stack, hook):
    tenant = stack.tenant()
    webhook_guardrail(
        tenant, hook, name="slow-check", action="flag", deadline_ms=300, fail_mode="closed"
    )
    before = wallet(tenant)
    hook.replies = [late(2.0)]

    error = refused(stack, tenant)

    assert (error.body["code"], error.body["message"]) == (
        "LM-2030",
        "Blocked by guardrail 'slow-check' (input): it could not check the request (no answer"
        " within 300 ms) and fails closed.",
    )
    assert PROMPT not in str(error.body)
    [row] = usage_rows([error.response.headers["x-request-id"]], expect=1)
    assert (row.status, row.error_code, row.provider_cost_micro, row.upstream_sent) == (
        400,
        "LM-2030",
        0,
        False,
    )
    assert row.guardrails == [
        {
            "guardrail": "slow-check",
            "phase": "input",
            "action": "flag",
            "matches": 0,
            "failed": True,
        }
    ]
    assert stack.stub.vendor_calls() == []
    assert wallet(tenant) == before


def test_a_rotated_secret_signs_the_next_call(stack, hook):
    from guardrails import services

    tenant = stack.tenant()
    made = webhook_guardrail(tenant, hook, name="vendor-check", action="block", fail_mode="closed")
    assert ask(stack, tenant).parse().choices[0].message.content  # the key's principal cached
    hook.secret = services.guardrail_rotate_secret(guardrail=made)

    raw = ask(stack, tenant)

    assert raw.parse().choices[0].message.content
    assert [call.signed for call in hook.received] == [True, True]
    assert len(stack.stub.vendor_calls()) == 2
