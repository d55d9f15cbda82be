"""Input guardrails end to end through the official SDKs and a real gateway: a blocked prompt
is LM-2030 naming the guardrail (never the value), reaches no vendor and costs nothing; a
redacting guardrail's values never reach the vendor (the stub records what it received); a
flagging one lets the prompt through as sent; another account's guardrail never applies."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.support.metrics import metric
from tests.support.usage import usage_rows

CARD = "4111 1111 1111 1111"
EMAIL = "bob.smith@example.com"


def guardrail(account_id: int | None, **fields):
    """A guardrail (the operator's when account_id is None), attached to `attach_to`'s
    account as its owner would attach it."""
    from accounts.models import Account
    from guardrails import services
    from guardrails.models import Guardrail

    account = Account.objects.get(pk=account_id) if account_id else None
    made, _ = services.guardrail_create(account=account, **fields)
    return Guardrail.objects.get(pk=made.pk)


def attach(made, tenant, *, by: str = "operator", key: bool = False) -> None:
    from accounts.models import Account, ApiKey
    from guardrails import services

    services.attachment_create(
        guardrail=made,
        account=Account.objects.get(pk=tenant.account_id),
        api_key=ApiKey.objects.get(pk=tenant.api_key_id) if key else None,
        by=by,
    )


def verdicts(stack, action: str, result: str) -> float:
    """The gateway's count of input checks by built-in detectors with this action and result."""
    return metric(
        stack.url, "tollgate_guardrail_verdicts_total",
        kind="detectors", phase="input", action=action, result=result,
    )  # fmt: skip


def wallet(tenant) -> tuple[int, int]:
    from billing.models import Wallet

    w = Wallet.objects.get(account_id=tenant.account_id)
    return w.balance_micro, w.reserved_micro


def test_a_blocked_prompt_reaches_no_vendor_and_costs_nothing(stack):
    tenant = stack.tenant()
    before = wallet(tenant)
    blocks = verdicts(stack, "block", "matched"), verdicts(stack, "block", "clean")
    no_cards = guardrail(
        None, name="no-cards", kind="detectors", detectors=["payment_card"], phase="input",
        action="block",
    )  # fmt: skip
    attach(no_cards, tenant)
    client = stack.openai(tenant)

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": f"charge my card {CARD} please"}],
        )

    body = refused.value.body
    assert body["code"] == "LM-2030"
    assert body["message"] == (
        "Blocked by guardrail 'no-cards' (input): it found 1 value of kind payment_card."
    )
    assert CARD not in str(refused.value) and "4111" not in str(refused.value)
    request_id = refused.value.response.headers["x-request-id"]
    [row] = usage_rows([request_id], expect=1)
    assert (row.status, row.error_code, row.provider_cost_micro, row.upstream_sent) == (
        400,
        "LM-2030",
        0,
        False,
    )
    assert row.guardrails == [
        {"guardrail": "no-cards", "phase": "input", "action": "block", "matches": 1}
    ]
    assert stack.stub.vendor_calls() == []
    assert wallet(tenant) == before
    # A prompt without a card is served as usual through the same guardrail.
    answer = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "order 1111 arrived"}]
    )
    assert answer.parse().choices[0].message.content
    assert len(stack.stub.vendor_calls()) == 1
    assert (verdicts(stack, "block", "matched"), verdicts(stack, "block", "clean")) == (
        blocks[0] + 1,
        blocks[1] + 1,
    )
    # Checked and passed: the row says the guardrail ran and found nothing.
    [row] = usage_rows([answer.headers["x-request-id"]], expect=1)
    assert (row.status, row.guardrails) == (
        200,
        [{"guardrail": "no-cards", "phase": "input", "action": "block", "matches": 0}],
    )


def test_redacted_values_never_reach_the_vendor_and_the_answer_is_served(stack):
    tenant = stack.tenant()
    emails = guardrail(
        None, name="redact-emails", kind="detectors", detectors=["email"], phase="both",
        action="redact",
    )  # fmt: skip
    orders = guardrail(
        tenant.account_id, name="order-ids", kind="custom", patterns=[r"ORD-\d{6}"],
        phase="input", action="redact",
    )  # fmt: skip
    attach(emails, tenant)
    attach(orders, tenant, by="tenant", key=True)

    raw = stack.anthropic(tenant).messages.with_raw_response.create(
        model="claude-3-5-haiku",
        max_tokens=50,
        system=f"Reply to {EMAIL} only.",
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": f"Mail {EMAIL} about ORD-123456 today"}],
            }
        ],
    )

    assert raw.parse().content[0].text
    [row] = usage_rows([raw.headers["x-request-id"]], expect=1)
    assert row.guardrails == [  # the operator's first, then the account's own
        {"guardrail": "redact-emails", "phase": "input", "action": "redact", "matches": 2},
        {"guardrail": "order-ids", "phase": "input", "action": "redact", "matches": 1},
        # phase "both": the answer was checked too, and had no address in it
        {"guardrail": "redact-emails", "phase": "output", "action": "redact", "matches": 0},
    ]
    [call] = stack.stub.vendor_calls()
    sent = str(call["body"])
    assert EMAIL not in sent and "ORD-123456" not in sent
    assert "Mail [REDACTED:email] about [REDACTED:custom] today" in sent
    assert "Reply to [REDACTED:email] only." in sent


def test_a_flagging_guardrail_lets_the_prompt_through_as_sent(stack):
    tenant = stack.tenant()
    flag = guardrail(
        None, name="flag-emails", kind="detectors", detectors=["email"], phase="input",
        action="flag",
    )  # fmt: skip
    attach(flag, tenant)

    raw = stack.openai(tenant).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": f"write to {EMAIL}"}]
    )

    [row] = usage_rows([raw.headers["x-request-id"]], expect=1)
    assert row.guardrails == [
        {"guardrail": "flag-emails", "phase": "input", "action": "flag", "matches": 1}
    ]
    [call] = stack.stub.vendor_calls()
    assert call["body"]["messages"] == [{"role": "user", "content": f"write to {EMAIL}"}]


def test_another_accounts_guardrail_never_applies(stack):
    guarded, other = stack.tenant(), stack.tenant()
    attach(
        guardrail(
            None, name="block-emails", kind="detectors", detectors=["email"], phase="input",
            action="block",
        ),
        guarded,
    )  # fmt: skip

    with pytest.raises(anthropic.BadRequestError):
        stack.anthropic(guarded).messages.create(
            model="claude-3-5-haiku", max_tokens=20, messages=[{"role": "user", "content": EMAIL}]
        )
    raw = stack.anthropic(other).messages.with_raw_response.create(
        model="claude-3-5-haiku", max_tokens=20, messages=[{"role": "user", "content": EMAIL}]
    )
    [row] = usage_rows([raw.headers["x-request-id"]], expect=1)
    assert row.guardrails == []

    [call] = stack.stub.vendor_calls()
    assert call["body"]["messages"] == [{"role": "user", "content": EMAIL}]


def test_a_pathological_tenant_pattern_runs_in_linear_time(stack):
    """Patterns that take a backtracking engine exponential time on these prompts: RE2 runs
    them in one pass, so the gateway answers both within the client's 10 s timeout."""
    tenant = stack.tenant()
    nested = guardrail(
        tenant.account_id, name="nested", kind="custom", patterns=[r"(a+)+$", r"(x|x)*y"],
        phase="input", action="block",
    )  # fmt: skip
    attach(nested, tenant, by="tenant")
    client = stack.openai(tenant, timeout=10)

    # 100,000 characters that almost match both: no match, served.
    almost = "a" * 50_000 + "!" + "x" * 50_000 + "!"
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": almost}]
    )
    assert raw.parse().choices[0].message.content
    [row] = usage_rows([raw.headers["x-request-id"]], expect=1)
    assert row.guardrails == [
        {"guardrail": "nested", "phase": "input", "action": "block", "matches": 0}
    ]
    # One more character makes the first pattern match: blocked, the vendor never called.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": almost + "a"}]
        )
    assert refused.value.body["message"] == (
        "Blocked by guardrail 'nested' (input): it found 1 value of kind custom."
    )
    assert len(stack.stub.vendor_calls()) == 1
