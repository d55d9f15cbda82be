"""One usage row per request, every field filled end to end, and never a prompt or answer."""

from __future__ import annotations

import re
import uuid

import httpx
import orjson

from tests.support.usage import chat, database_dump, set_bandwidth_rate, usage_rows
from tests.support.waits import wait_until

PROMPT = [{"role": "user", "content": "Count these five words"}]
PROMPT_WORDS = 4


def test_non_streamed_request_logs_every_field_and_charges_what_it_logs(stack):
    from accounts.models import ApiKey, Group

    tenant = stack.tenant()
    set_bandwidth_rate(tenant)
    request_id = f"mine-{uuid.uuid4().hex[:8]}"

    response, sent = chat(
        stack.url,
        tenant,
        {"model": "gpt-4o-mini", "messages": PROMPT},
        headers={"X-Request-Id": request_id},
    )

    assert response.status_code == 200
    assert response.headers["x-request-id"] == request_id
    [row] = usage_rows([request_id], expect=1)
    # 4 x 0.15 + 8 x 0.60 = 5.4 micro-USD, rounded up; 1 micro-USD per byte of bandwidth.
    assert {
        f: getattr(row, f)
        for f in (
            "account_id",
            "group_id",
            "api_key_id",
            "caller_label",
            "endpoint",
            "model_requested",
            "model_served",
            "provider",
            "served_by",
            "tokens_in",
            "tokens_out",
            "byok_tokens_in",
            "byok_tokens_out",
            "provider_cost_micro",
            "bytes_in",
            "bytes_out",
            "bandwidth_charge_micro",
            "upstream_sent",
            "status",
            "error_code",
            "ttft_ms",
            "streamed",
        )
    } == {
        "account_id": tenant.account_id,
        "group_id": tenant.group_id,
        "api_key_id": tenant.api_key_id,
        "caller_label": "",
        "endpoint": "chat",
        "model_requested": "gpt-4o-mini",
        "model_served": "gpt-4o-mini",
        "provider": "stub-openai",
        "served_by": "platform",
        "tokens_in": PROMPT_WORDS,
        "tokens_out": 8,
        "byok_tokens_in": 0,
        "byok_tokens_out": 0,
        "provider_cost_micro": 6,
        "bytes_in": len(sent),
        "bytes_out": len(response.content),
        "bandwidth_charge_micro": len(sent) + len(response.content),
        "upstream_sent": True,
        "status": 200,
        "error_code": "",
        "ttft_ms": None,
        "streamed": False,
    }
    assert 0 <= row.latency_ms < 5000
    [attempt] = row.attempts
    assert (
        attempt.order,
        attempt.provider,
        attempt.model,
        attempt.served_by,
        attempt.outcome,
        attempt.upstream_status,
    ) == (1, "stub-openai", "gpt-4o-mini", "platform", "ok", 200)
    charged = 6 + len(sent) + len(response.content)
    wait_until(
        lambda: Group.objects.get(pk=tenant.group_id).spent_micro == charged,
        what="settle to charge the group",
    )
    assert ApiKey.objects.get(pk=tenant.api_key_id).spent_micro == charged


def test_served_platform_attempt_names_its_escrow_reservation(stack):
    from billing.models import Reservation

    tenant = stack.tenant()
    response, _ = chat(stack.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT})

    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    [reservation] = Reservation.objects.filter(request_id=row.request_id)
    assert [a.reservation_id for a in row.attempts] == [reservation.pk]


def test_request_id_is_generated_when_absent_and_echoed_on_refusals_too(stack):
    tenant = stack.tenant()

    response, _ = chat(stack.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT})
    refused = httpx.post(
        f"{stack.url}/v1/chat/completions", json={}, headers={"X-Request-Id": "given-to-a-refusal"}
    )
    invalid_id = httpx.post(
        f"{stack.url}/v1/chat/completions",
        json={},
        headers={"X-Request-Id": "spaces are not allowed"},
    )

    generated = response.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    assert [r.request_id for r in usage_rows([generated], expect=1)] == [generated]
    assert (refused.status_code, refused.headers["x-request-id"]) == (401, "given-to-a-refusal")
    assert re.fullmatch(r"[0-9a-f]{32}", invalid_id.headers["x-request-id"])


def test_streamed_anthropic_request_logs_stream_ttft_and_its_tokens(stack):
    tenant = stack.tenant()
    set_bandwidth_rate(tenant)
    body = orjson.dumps(
        {
            "model": "claude-3-5-haiku",
            "max_tokens": 100,
            "stream": True,
            "system": "Be brief.",
            "messages": PROMPT,
        }
    )

    with httpx.stream(
        "POST",
        f"{stack.url}/v1/messages",
        content=body,
        timeout=30,
        headers={"x-api-key": tenant.api_key, "content-type": "application/json"},
    ) as response:
        received = b"".join(response.iter_raw())

    assert response.status_code == 200 and b"message_stop" in received
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (
        row.endpoint,
        row.model_requested,
        row.model_served,
        row.provider,
        row.served_by,
        row.streamed,
        row.status,
    ) == (
        "messages",
        "claude-3-5-haiku",
        "claude-3-5-haiku",
        "stub-anthropic",
        "platform",
        True,
        200,
    )
    # 6 x 0.8 + 8 x 4.0 = 36.8 micro-USD, rounded up.
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (PROMPT_WORDS + 2, 8, 37)
    assert (row.bytes_in, row.bytes_out) == (len(body), len(received))
    assert row.bandwidth_charge_micro == len(body) + len(received)
    assert row.ttft_ms is not None and row.ttft_ms <= row.latency_ms


def test_team_key_request_logs_byok_tokens_and_costs_nothing(stack):
    from accounts.models import Group
    from byok.services import team_key_add

    tenant = stack.tenant()
    team_key_add(
        group=Group.objects.get(pk=tenant.group_id),
        provider="stub-openai",
        label="team",
        key="sk-team-key-0042",
    )
    stack.gateway.reload()

    response, _ = chat(stack.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT})

    assert response.status_code == 200
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (
        row.served_by,
        row.tokens_in,
        row.tokens_out,
        row.byok_tokens_in,
        row.byok_tokens_out,
        row.provider_cost_micro,
    ) == ("team", 0, 0, PROMPT_WORDS, 8, 0)
    assert [(a.served_by, a.outcome) for a in row.attempts] == [("team", "ok")]
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-key-0042"]


def test_fallback_after_upstream_errors_logs_the_whole_attempt_trail(stack):
    tenant = stack.tenant()
    stack.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o"}})

    response, _ = chat(
        stack.url, tenant, {"model": "gpt-4o", "fallback_model": "gpt-4o-mini", "messages": PROMPT}
    )

    assert response.status_code == 200
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (row.model_requested, row.model_served, row.status) == ("gpt-4o", "gpt-4o-mini", 200)
    assert [(a.order, a.model, a.outcome, a.upstream_status) for a in row.attempts] == [
        (1, "gpt-4o", "upstream_error", 500),
        (2, "gpt-4o", "upstream_error", 500),
        (3, "gpt-4o-mini", "ok", 200),
    ]


def test_upstream_failure_logs_its_error_code(stack):
    tenant = stack.tenant()
    stack.stub.faults({"kind": "500", "times": 2})

    response, _ = chat(stack.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT})

    assert response.status_code == 502
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (
        row.status,
        row.error_code,
        row.served_by,
        row.tokens_in,
        row.provider_cost_micro,
        row.upstream_sent,
    ) == (502, "LM-5001", "", 0, 0, True)
    assert [a.outcome for a in row.attempts] == ["upstream_error", "upstream_error"]


def test_budget_refusal_is_logged_but_never_billed_for_bandwidth(stack):
    tenant = stack.tenant(budget_micro=0)
    set_bandwidth_rate(tenant)

    response, sent = chat(stack.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT})

    assert response.status_code == 402
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (
        row.status,
        row.error_code,
        row.upstream_sent,
        row.bytes_in,
        row.bandwidth_charge_micro,
        list(row.attempts),
    ) == (402, "LM-4001", False, len(sent), 0, [])
    assert stack.stub.vendor_calls() == []


def test_prompts_and_answers_are_stored_nowhere(stack):
    tenant = stack.tenant()
    marker = f"zebra{uuid.uuid4().hex[:12]}"
    prompt = [{"role": "user", "content": f"Remember the word {marker} please"}]
    client = stack.openai(tenant)

    plain = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=prompt)
    streamed = list(
        client.chat.completions.create(model="gpt-4o-mini", messages=prompt, stream=True)
    )
    with stack.anthropic(tenant).messages.stream(
        model="claude-3-5-haiku", max_tokens=50, system=f"System {marker}", messages=prompt
    ) as stream:
        answer = stream.get_final_text()

    assert plain.http_response.status_code == 200 and streamed and answer
    rows = usage_rows(group_id=tenant.group_id, expect=3)
    assert len(rows) == 3
    dump = database_dump()
    assert str(rows[0].request_id) in dump  # the dump does hold the usage rows
    assert marker not in dump
    assert answer not in dump  # the stub's answer names the model: never stored either
    assert marker not in stack.gateway.log()
