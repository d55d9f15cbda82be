"""Internal routes for trusted services: /internal/complete, /internal/stream, /internal/decide.

Bearer GATEWAY_INTERNAL_TOKEN; the body names group, request_id, model, messages and an
optional fallback_model. A body without request_id or with an unknown group is refused
LM-2001 before anything is paid for.
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.support.processes import INTERNAL_TOKEN
from tests.support.profiles import PLATFORM_KEY
from tests.support.sse import sse_events
from tests.support.usage import usage_rows

AUTH = {"Authorization": f"Bearer {INTERNAL_TOKEN}"}
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "summarise the ticket"},
]
ANSWER = "Hello from the stub model gpt-4o-mini reply ok"


def internal(stack, action: str, body: dict, headers=AUTH) -> httpx.Response:
    return httpx.post(f"{stack.url}/internal/{action}", json=body, headers=headers, timeout=20)


def body_for(tenant, request_id: str, **extra) -> dict:
    return {
        "group": tenant.group_id,
        "request_id": request_id,
        "model": "gpt-4o-mini",
        "messages": MESSAGES,
        **extra,
    }


def wallet_reserved(tenant) -> int:
    from billing.models import Wallet

    return Wallet.objects.get(account_id=tenant.account_id).reserved_micro


def test_internal_complete_answers_json_and_logs_the_given_request_id(stack):
    tenant = stack.tenant()

    response = internal(stack, "complete", body_for(tenant, "job-41.summary", max_tokens=20))

    assert response.status_code == 200
    assert response.headers["x-request-id"] == "job-41.summary"
    assert response.json() == {
        "request_id": "job-41.summary",
        "model": "gpt-4o-mini",
        "content": ANSWER,
        "finish_reason": "stop",
        "usage": {"input_tokens": 5, "output_tokens": 8},
    }
    [call] = stack.stub.vendor_calls()
    assert (call["model"], call["key"], call["stream"], call["max_tokens"]) == (
        "gpt-4o-mini",
        PLATFORM_KEY,
        False,
        20,
    )
    [row] = usage_rows(["job-41.summary"], expect=1)
    assert (row.endpoint, row.group_id, row.api_key_id, row.tokens_in, row.tokens_out) == (
        "internal.complete",
        tenant.group_id,
        None,
        5,
        8,
    )


def test_internal_stream_sends_token_events_then_done(stack):
    tenant = stack.tenant()

    response = internal(stack, "stream", body_for(tenant, "job-42"))

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    events = sse_events(response.text)
    assert [name for name, _ in events] == ["token"] * 8 + ["done"]
    assert "".join(orjson.loads(data)["text"] for _, data in events[:-1]) == ANSWER
    assert orjson.loads(events[-1][1]) == {
        "request_id": "job-42",
        "model": "gpt-4o-mini",
        "finish_reason": "stop",
        "usage": {"input_tokens": 5, "output_tokens": 8},
    }
    [call] = stack.stub.vendor_calls()
    assert call["stream"] is True
    [row] = usage_rows(["job-42"], expect=1)
    assert (row.endpoint, row.streamed, row.tokens_out) == ("internal.stream", True, 8)


def test_internal_stream_falls_back_before_the_first_token_and_never_after(stack):
    tenant = stack.tenant()
    stack.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}})

    fell_back = internal(
        stack, "stream", body_for(tenant, "job-43", fallback_model="claude-3-5-haiku")
    )

    events = sse_events(fell_back.text)
    assert [name for name, _ in events] == ["token"] * 8 + ["done"]
    assert orjson.loads(events[-1][1])["model"] == "claude-3-5-haiku"
    assert [c["model"] for c in stack.stub.vendor_calls()] == [
        "gpt-4o-mini",
        "gpt-4o-mini",
        "claude-3-5-haiku-latest",
    ]

    stack.stub.clear()
    stack.stub.faults({"kind": "fail_after_tokens", "after_tokens": 3})
    broken = internal(
        stack, "stream", body_for(tenant, "job-44", fallback_model="claude-3-5-haiku")
    )

    events = sse_events(broken.text)
    assert [name for name, _ in events] == ["token"] * 3 + ["error"]
    assert "".join(orjson.loads(data)["text"] for _, data in events[:-1]) == "Hello from the"
    assert orjson.loads(events[-1][1])["error"]["code"] == "LM-5001"
    assert len(stack.stub.vendor_calls()) == 1


def test_internal_decide_returns_the_plan_and_calls_nothing(stack):
    from core.money import TokenPrices, prompt_tokens_bound, with_margin_micro

    tenant = stack.tenant()

    response = internal(
        stack,
        "decide",
        body_for(tenant, "job-45", max_tokens=100, fallback_model="claude-3-5-haiku"),
    )

    assert response.status_code == 200
    # Worst case of each link: 29 prompt bytes + 8 per message (the system one too) + 8 = 53
    # tokens in, 100 out, x 1.2 margin: ceil(67.95) = 68 -> 82 on gpt-4o-mini, 443 -> 532 on
    # claude-3-5-haiku.
    tokens_in = prompt_tokens_bound(prompt_bytes=len("Be brief.summarise the ticket"), messages=2)
    mini = with_margin_micro(
        TokenPrices.configured(
            input_micro_per_mtok=150_000, output_micro_per_mtok=600_000
        ).cost_micro(tokens_in=tokens_in, tokens_out=100),
        margin_pct=120,
    )
    haiku = with_margin_micro(
        TokenPrices.configured(
            input_micro_per_mtok=800_000, output_micro_per_mtok=4_000_000
        ).cost_micro(tokens_in=tokens_in, tokens_out=100),
        margin_pct=120,
    )
    assert (mini, haiku) == (82, 532)
    assert response.json() == {
        "request_id": "job-45",
        "budget_estimate_micro": haiku,
        "links": [
            {
                "order": 1,
                "provider": "stub-openai",
                "model": "gpt-4o-mini",
                "upstream_model": "gpt-4o-mini",
                "max_tokens": 100,
                "breaker": "stub-openai",
                "locked": False,
                "attempts": [
                    {
                        "served_by": "platform",
                        "source": "stub-openai:gpt-4o-mini:platform",
                        "needs_escrow": True,
                        "escrow_budget_micro": mini,
                        "team_keys": 0,
                    }
                ],
            },
            {
                "order": 2,
                "provider": "stub-anthropic",
                "model": "claude-3-5-haiku",
                "upstream_model": "claude-3-5-haiku-latest",
                "max_tokens": 100,
                "breaker": "stub-anthropic",
                "locked": False,
                "attempts": [
                    {
                        "served_by": "platform",
                        "source": "stub-anthropic:claude-3-5-haiku:platform",
                        "needs_escrow": True,
                        "escrow_budget_micro": haiku,
                        "team_keys": 0,
                    }
                ],
            },
        ],
    }
    assert stack.stub.calls() == []
    assert wallet_reserved(tenant) == 0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-of-enough-length-0123456789"},
        {"Authorization": f"Token {INTERNAL_TOKEN}"},
    ],
    ids=["missing", "wrong", "wrong-scheme"],
)
def test_internal_routes_need_the_internal_token(stack, headers):
    tenant = stack.tenant()

    for action in ("complete", "stream", "decide", "reload"):
        response = internal(stack, action, body_for(tenant, "job-46"), headers=headers)
        assert (action, response.status_code, response.json()["error"]["code"]) == (
            action,
            401,
            "LM-1001",
        )
    # A tenant's own virtual key is not the internal token either.
    response = internal(
        stack,
        "complete",
        body_for(tenant, "job-46"),
        headers={"Authorization": f"Bearer {tenant.api_key}"},
    )
    assert (response.status_code, response.json()["error"]["code"]) == (401, "LM-1001")
    assert stack.stub.vendor_calls() == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"request_id": None}, "'request_id' is required (1-64 of [A-Za-z0-9._:-])."),
        ({"request_id": ""}, "'request_id' is required (1-64 of [A-Za-z0-9._:-])."),
        ({"request_id": "has spaces"}, "'request_id' is required (1-64 of [A-Za-z0-9._:-])."),
        ({"group": 987654321}, "Unknown group."),
        ({"group": None}, "'group' must be a group id."),
        ({"group": "1"}, "'group' must be a group id."),
    ],
    ids=[
        "no-request-id",
        "empty-request-id",
        "bad-request-id",
        "unknown-group",
        "no-group",
        "group-as-text",
    ],
)
def test_internal_body_without_request_id_or_known_group_is_refused_before_any_cost(
    stack, change, message
):
    tenant = stack.tenant()
    body = {k: v for k, v in {**body_for(tenant, "job-47"), **change}.items() if v is not None}

    for action in ("complete", "stream", "decide"):
        response = internal(stack, action, body)
        assert (response.status_code, response.json()["error"]) == (
            400,
            {"message": message, "type": "invalid_request_error", "code": "LM-2001"},
        )
    assert stack.stub.vendor_calls() == []
    assert wallet_reserved(tenant) == 0


def test_internal_body_over_the_size_cap_is_lm_2013_before_any_cost(stack):
    tenant = stack.tenant()
    huge = body_for(tenant, "job-48", messages=[{"role": "user", "content": "x" * 1_100_000}])

    response = internal(stack, "complete", huge)

    assert (response.status_code, response.json()["error"]["code"]) == (413, "LM-2013")
    assert stack.stub.vendor_calls() == []
    assert wallet_reserved(tenant) == 0


def attach_custom(tenant, **fields) -> None:
    """The account's own custom guardrail, attached to the whole account (every group)."""
    from accounts.models import Account
    from guardrails import services

    account = Account.objects.get(pk=tenant.account_id)
    made, _ = services.guardrail_create(account=account, kind="custom", **fields)
    services.attachment_create(guardrail=made, account=account)


def test_internal_routes_pass_the_groups_guardrails_both_ways(stack):
    tenant = stack.tenant()
    attach_custom(tenant, name="no-tickets", words=["ticket", "reply"], phase="both",
                  action="redact")  # fmt: skip

    response = internal(stack, "complete", body_for(tenant, "job-45"))

    assert response.json()["content"] == ANSWER.replace("reply", "[REDACTED:custom]")
    [call] = stack.stub.vendor_calls()
    assert call["body"]["messages"][1]["content"] == "summarise the [REDACTED:custom]"
    [row] = usage_rows(["job-45"], expect=1)
    assert row.guardrails == [
        {"guardrail": "no-tickets", "phase": "input", "action": "redact", "matches": 1},
        {"guardrail": "no-tickets", "phase": "output", "action": "redact", "matches": 1},
    ]


def test_an_internal_stream_a_guardrail_blocks_ends_with_an_error_event(stack):
    tenant = stack.tenant()
    attach_custom(tenant, name="no-reply", words=["reply"], phase="output", action="block")

    response = internal(stack, "stream", body_for(tenant, "job-46"))

    events = sse_events(response.text)
    assert [name for name, _ in events] == ["token", "error"]
    assert orjson.loads(events[0][1])["text"] == "Hello from the stub model gpt-4o-mini "
    assert orjson.loads(events[1][1])["error"] == {
        "code": "LM-2030",
        "message": "Blocked by guardrail 'no-reply' (output): it found 1 value of kind custom.",
        "type": "invalid_request_error",
    }
    [row] = usage_rows(["job-46"], expect=1)
    assert (row.status, row.error_code, row.tokens_out) == (400, "LM-2030", 1)
