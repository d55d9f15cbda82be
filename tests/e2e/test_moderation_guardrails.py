"""Moderation guardrails end to end: a real gateway, the stub vendor's moderation model and the
official SDKs. Each check is a request of its own on the same key: its own usage row
(`guardrail.moderation`, labelled with the request it checked), its own cost and receipt. A
prompt the model flags is LM-2030 naming the categories, and the chat model is never called;
a threshold counts scores the model itself let pass; a moderation vendor that is down or late
fails open (served, recorded failed) or closed (LM-2030), as the guardrail says; an answer
the model flags is blocked whole, or held and blocked when streamed.

The stub flags a text with the word `violent` (violence 0.91) or `hateful` (hate 0.85), and
scores `rude` harassment 0.3 without flagging it; it reports one input token per word."""

from __future__ import annotations

import openai
import pytest

from billing.models import Receipt, Wallet
from core.money import TokenPrices
from tests.byok.helpers import team_keys
from tests.e2e.test_input_guardrails import attach, guardrail
from tests.e2e.test_output_guardrails import chat_stream
from tests.support.profiles import (
    MODERATION_MODEL,
    MODERATION_PRICE,
    api_profiles,
    install_profiles,
)
from tests.support.usage import settled, usage_rows

WALLET = 10_000_000
CHAT_PRICES = {"input_micro_per_mtok": 150_000, "output_micro_per_mtok": 600_000}  # gpt-4o-mini
MODERATION = {"input_micro_per_mtok": MODERATION_PRICE, "output_micro_per_mtok": 0}


def profiles(stub_url: str) -> list[dict]:
    """The API profiles, and a chat model whose vendor name is flagged in every answer."""
    spec = api_profiles(stub_url)
    spec[0]["models"].append(
        {"name": "loud-mini", "upstream": "violent", **CHAT_PRICES}  # "... model violent ..."
    )
    return spec


@pytest.fixture
def moderated(stack):
    install_profiles(stack.stub.url, profiles(stack.stub.url))
    stack.gateway.reload()
    return stack


def tenant_with(stack, **fields):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    made = guardrail(
        None, name="moderated", kind="moderation", moderation_model=MODERATION_MODEL, **fields
    )
    attach(made, tenant)
    return tenant


def ask(stack, tenant, content: str, model: str = "gpt-4o-mini"):
    return stack.openai(tenant).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}]
    )


def refused(stack, tenant, content: str, model: str = "gpt-4o-mini") -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(stack, tenant, content, model)
    return caught.value


def paths(stack) -> list[str]:
    return [call["path"] for call in stack.stub.vendor_calls()]


def balance(tenant) -> int:
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert wallet.reserved_micro == 0
    return wallet.balance_micro


def test_a_flagged_prompt_is_blocked_and_its_check_billed_on_a_row_of_its_own(moderated):
    tenant = tenant_with(moderated, phase="input", action="block")

    error = refused(moderated, tenant, "describe a violent storm")

    assert (error.body["code"], error.body["message"]) == (
        "LM-2030",
        "Blocked by guardrail 'moderated' (input): its moderation model flagged the request"
        " (violence).",
    )
    assert paths(moderated) == ["/v1/moderations"]  # the chat model was never called
    [call] = moderated.stub.vendor_calls()
    assert call["body"]["input"] == ["describe a violent storm"]
    request_id = error.response.headers["x-request-id"]
    check, asked = sorted(
        settled(tenant, 2), key=lambda row: row.endpoint != "guardrail.moderation"
    )
    cost = TokenPrices.configured(**MODERATION).cost_micro(tokens_in=4, tokens_out=0)
    assert (check.endpoint, check.client_request_id, check.status, check.model_served) == (
        "guardrail.moderation",
        request_id,
        200,
        MODERATION_MODEL,
    )
    assert (check.tokens_in, check.provider_cost_micro, check.served_by) == (4, cost, "platform")
    assert (asked.request_id, asked.status, asked.error_code, asked.provider_cost_micro) == (
        request_id,
        400,
        "LM-2030",
        0,
    )
    assert asked.guardrails == [  # the verdict names its check's own row
        {"guardrail": "moderated", "phase": "input", "action": "block", "matches": 1,
         "check": check.request_id}
    ]  # fmt: skip
    assert balance(tenant) == WALLET - cost
    receipt = Receipt.objects.get(account_id=tenant.account_id, request_id=check.request_id)
    assert (receipt.kind, receipt.cost_micro) == ("charge", cost)


def test_a_clean_prompt_is_served_after_its_check_and_both_are_billed(moderated):
    tenant = tenant_with(moderated, phase="input", action="block")

    raw = ask(moderated, tenant, "describe a calm morning")

    assert raw.parse().choices[0].message.content
    assert paths(moderated) == ["/v1/moderations", "/v1/chat/completions"]
    rows = usage_rows([raw.headers["x-request-id"]], expect=2)
    by_endpoint = {row.endpoint: row for row in rows}
    check, chat = by_endpoint["guardrail.moderation"], by_endpoint["chat"]
    assert (check.tokens_in, chat.status) == (4, 200)
    assert chat.guardrails == [
        {"guardrail": "moderated", "phase": "input", "action": "block", "matches": 0,
         "check": check.request_id}
    ]  # fmt: skip
    settled(tenant, 2)
    assert balance(tenant) == WALLET - check.provider_cost_micro - chat.provider_cost_micro


def test_a_threshold_counts_a_score_the_model_itself_lets_pass(moderated):
    own_cut = tenant_with(moderated, phase="input", action="block")
    assert ask(moderated, own_cut, "a rude reply").parse().choices[0].message.content

    strict = moderated.tenant(wallet_micro=WALLET)
    attach(
        guardrail(
            None, name="strict", kind="moderation", moderation_model=MODERATION_MODEL,
            moderation_threshold=0.25, phase="input", action="block",
        ),
        strict,
    )  # fmt: skip
    error = refused(moderated, strict, "a rude reply")
    assert error.body["message"] == (
        "Blocked by guardrail 'strict' (input): its moderation model flagged the request"
        " (harassment)."
    )


@pytest.mark.parametrize("fail_mode", ["open", "closed"])
def test_a_moderation_vendor_that_is_down_fails_as_the_guardrail_says(moderated, fail_mode):
    tenant = tenant_with(moderated, phase="input", action="block", fail_mode=fail_mode)
    moderated.stub.faults({"kind": "500", "times": 10, "match": {"model": MODERATION_MODEL}})

    if fail_mode == "open":
        raw = ask(moderated, tenant, "describe a violent storm")
        assert raw.parse().choices[0].message.content  # not checked: served
        request_id = raw.headers["x-request-id"]
        rows = usage_rows([request_id], expect=2)
        [chat] = [row for row in rows if row.endpoint == "chat"]
        [check] = [row for row in rows if row.endpoint == "guardrail.moderation"]
        assert chat.guardrails == [
            {"guardrail": "moderated", "phase": "input", "action": "block", "matches": 0,
             "failed": True, "check": check.request_id}
        ]  # fmt: skip
        assert paths(moderated)[-1] == "/v1/chat/completions"
    else:
        error = refused(moderated, tenant, "describe a violent storm")
        assert error.body["message"] == (
            "Blocked by guardrail 'moderated' (input): it could not check the request (the"
            " moderation call failed: LM-5001) and fails closed."
        )
        assert set(paths(moderated)) == {"/v1/moderations"}
    check = next(r for r in settled(tenant, 2) if r.endpoint == "guardrail.moderation")
    assert (check.status, check.error_code, check.provider_cost_micro) == (502, "LM-5001", 0)


def test_a_moderation_past_its_deadline_fails_closed_and_its_row_says_so(moderated):
    tenant = tenant_with(moderated, phase="input", action="block", deadline_ms=300,
                         fail_mode="closed")  # fmt: skip
    moderated.stub.faults({"kind": "hang", "match": {"model": MODERATION_MODEL}})

    error = refused(moderated, tenant, "describe a calm morning")

    assert error.body["message"] == (
        "Blocked by guardrail 'moderated' (input): it could not check the request (the"
        " moderation call failed: LM-5002) and fails closed."
    )
    check = next(r for r in settled(tenant, 2) if r.endpoint == "guardrail.moderation")
    assert (check.status, check.error_code) == (504, "LM-5002")


def test_an_answer_the_model_flags_is_blocked_whole_or_held_and_blocked_streamed(moderated):
    tenant = tenant_with(moderated, phase="output", action="block")
    flagged = (
        "Blocked by guardrail 'moderated' (output): its moderation model flagged the answer"
        " (violence)."
    )

    error = refused(moderated, tenant, "hello there", model="loud-mini")
    assert error.body["message"] == flagged
    text, failed = chat_stream(moderated, tenant, "loud-mini")
    assert text == "" and failed is not None and failed.body["message"] == flagged

    checks = [call for call in moderated.stub.vendor_calls() if call["path"] == "/v1/moderations"]
    answer = "Hello from the stub model violent reply ok"
    assert [call["body"]["input"] for call in checks] == [[answer], [answer]]
    rows = settled(tenant, 4)
    asked = [row for row in rows if row.endpoint == "chat"]
    assert [(row.status, row.tokens_out, row.streamed) for row in asked] == [
        (400, 8, False),
        (400, 8, True),
    ]


def test_a_teams_own_key_serves_its_checks_and_spends_no_platform_money(moderated):
    tenant = tenant_with(moderated, phase="input", action="block")
    team_keys(moderated, tenant, "stub-openai", ["sk-team-moderation"])

    error = refused(moderated, tenant, "a hateful remark")

    assert error.body["message"] == (
        "Blocked by guardrail 'moderated' (input): its moderation model flagged the request (hate)."
    )
    [call] = moderated.stub.vendor_calls()
    assert (call["path"], call["key"]) == ("/v1/moderations", "sk-team-moderation")
    check = next(r for r in settled(tenant, 2) if r.endpoint == "guardrail.moderation")
    assert (check.served_by, check.byok_tokens_in, check.provider_cost_micro) == ("team", 3, 0)
    assert balance(tenant) == WALLET
