"""Bandwidth metering: body bytes in and out, SSE included, charged once, only if sent upstream."""

from __future__ import annotations

import json

import httpx
import pytest

from accounts.models import ApiKey, Group
from core.money import bandwidth_charge_micro
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

PER_BYTE = 1_000_000_000  # 1 micro-USD per byte: the charge equals the bytes


def metered_tenant(stack, rate: int = PER_BYTE):
    tenant = stack.tenant()
    Group.objects.filter(pk=tenant.group_id).update(bandwidth_micro_usd_per_gb=rate)
    stack.gateway.reload()
    return tenant


def body_bytes(**extra) -> bytes:
    return json.dumps(
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "count my bytes"}],
            **extra,
        }
    ).encode()


def spent(tenant) -> tuple[int, int, int]:
    group = Group.objects.get(pk=tenant.group_id)
    return (
        group.spent_micro,
        group.settled_micro,
        ApiKey.objects.get(pk=tenant.api_key_id).spent_micro,
    )


def test_a_non_streamed_request_is_charged_its_exact_body_bytes(stack):
    tenant = metered_tenant(stack)
    sent = body_bytes()

    response = httpx.post(
        f"{stack.url}/v1/chat/completions",
        content=sent,
        headers={"Authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
    )

    assert response.status_code == 200
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (row.bytes_in, row.bytes_out) == (len(sent), len(response.content))
    assert row.bandwidth_charge_micro == len(sent) + len(response.content)
    cost = row.provider_cost_micro
    wait_until(lambda: spent(tenant)[0] == cost + row.bandwidth_charge_micro, what="settle")
    assert spent(tenant) == (
        cost + row.bandwidth_charge_micro,
        cost,
        cost + row.bandwidth_charge_micro,
    )


def test_a_stream_is_charged_every_sse_byte_it_wrote(stack):
    tenant = metered_tenant(stack, rate=80_000)
    sent = body_bytes(stream=True, stream_options={"include_usage": True})
    received = 0
    with httpx.stream(
        "POST",
        f"{stack.url}/v1/chat/completions",
        content=sent,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
    ) as response:
        for chunk in response.iter_raw():
            received += len(chunk)
        request_id = response.headers["x-request-id"]

    [row] = usage_rows([request_id], expect=1)
    assert (row.bytes_in, row.bytes_out, row.streamed) == (len(sent), received, True)
    assert row.bandwidth_charge_micro == bandwidth_charge_micro(
        total_bytes=len(sent) + received, micro_per_gb=80_000
    )
    assert row.bandwidth_charge_micro == -(-(len(sent) + received) * 80_000 // 10**9)


def test_a_client_that_drops_mid_stream_pays_for_what_it_received(stack):
    tenant = metered_tenant(stack)
    stack.stub.faults({"kind": "slow", "delay_ms": 400})
    sent = body_bytes(stream=True)
    received = 0
    content_events = 0
    with httpx.stream(
        "POST",
        f"{stack.url}/v1/chat/completions",
        content=sent,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
    ) as response:
        request_id = response.headers["x-request-id"]
        for chunk in response.iter_raw():
            received += len(chunk)
            content_events += chunk.count(b'"content":"') - chunk.count(b'"content":""')
            if content_events >= 3:
                break  # leave: closing the stream drops the connection

    [row] = usage_rows([request_id], expect=1)
    assert (row.status, row.error_code, row.upstream_sent) == (499, "client_closed", True)
    assert (row.bytes_in, row.bytes_out) == (len(sent), received)
    assert row.bandwidth_charge_micro == len(sent) + received


def test_refusals_are_never_billed_for_bandwidth(stack):
    tenant = metered_tenant(stack)
    for body in (b"{broken", body_bytes(model="no-such-model")):
        response = httpx.post(
            f"{stack.url}/v1/chat/completions",
            content=body,
            headers={"Authorization": f"Bearer {tenant.api_key}"},
        )
        assert response.status_code == 400

    rows = usage_rows(group_id=tenant.group_id, expect=2)
    assert [(r.upstream_sent, r.bandwidth_charge_micro) for r in rows] == [(False, 0), (False, 0)]
    assert spent(tenant) == (0, 0, 0)


def post(stack, tenant, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/chat/completions",
        content=body,
        timeout=30,
        headers={"Authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
    )


def test_every_refusal_before_the_vendor_bills_nothing_at_a_bandwidth_rate(stack):
    """LM-1003, LM-2001, LM-2013, LM-3001, LM-4001, LM-4002 and LM-3021 cost 0, bytes included."""
    metered = metered_tenant(stack)
    no_budget = stack.tenant(budget_micro=0)
    no_wallet = stack.tenant(wallet_micro=0)
    rate_limited = stack.tenant()
    Group.objects.filter(
        pk__in=[no_budget.group_id, no_wallet.group_id, rate_limited.group_id]
    ).update(bandwidth_micro_usd_per_gb=PER_BYTE)
    ApiKey.objects.filter(pk=metered.api_key_id).update(allowed_models=["gpt-4o-mini"])
    ApiKey.objects.filter(pk=rate_limited.api_key_id).update(rpm_limit=1)
    stack.gateway.reload()
    too_big = body_bytes(padding="x" * (1_048_576 + 1))

    refused = {
        "LM-1003": post(stack, metered, body_bytes(model="gpt-4o")),
        "LM-2001": post(stack, metered, body_bytes(model="no-such-model")),
        "LM-2013": post(stack, metered, too_big),
        "LM-4001": post(stack, no_budget, body_bytes()),
        "LM-4002": post(stack, no_wallet, body_bytes()),
    }
    served = post(stack, rate_limited, body_bytes())
    refused["LM-3001"] = post(stack, rate_limited, body_bytes())

    assert {code: r.json()["error"]["code"] for code, r in refused.items()} == {
        code: code for code in refused
    }
    assert served.status_code == 200
    assert len(stack.stub.vendor_calls()) == 1  # only the served request reached the vendor
    for tenant, count in ((metered, 3), (no_budget, 1), (no_wallet, 1)):
        rows = usage_rows(group_id=tenant.group_id, expect=count)
        assert [(r.bandwidth_charge_micro, r.provider_cost_micro) for r in rows] == [(0, 0)] * count
        assert sum(r.bytes_in for r in rows) > 0  # metered, yet not billed
        assert spent(tenant) == (0, 0, 0)
    [ok, limited] = usage_rows(group_id=rate_limited.group_id, expect=2)
    assert (limited.error_code, limited.bandwidth_charge_micro) == ("LM-3001", 0)
    charged = ok.provider_cost_micro + ok.bandwidth_charge_micro
    wait_until(lambda: spent(rate_limited)[0] == charged, what="the served request to settle")
    assert ok.bandwidth_charge_micro == ok.bytes_in + ok.bytes_out


def test_lm_3021_after_team_keys_were_tried_bills_no_bandwidth(stack):
    from tests.byok.helpers import team_keys

    tenant = metered_tenant(stack)
    team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])  # fallback off
    stack.stub.faults({"kind": "429", "retry_after": 60, "times": 2})

    response = post(stack, tenant, body_bytes())

    assert response.json()["error"]["code"] == "LM-3021"
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-a", "sk-team-b"]
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.upstream_sent, row.error_code, row.bandwidth_charge_micro) == (
        True,
        "LM-3021",
        0,
    )
    assert row.bytes_in == len(body_bytes()) and row.bytes_out == len(response.content)
    assert spent(tenant) == (0, 0, 0)


@pytest.mark.timeout(60)
def test_a_client_gone_before_any_response_pays_only_for_its_request_bytes(stack):
    tenant = metered_tenant(stack)
    stack.stub.faults({"kind": "slow", "delay_ms": 300})  # 8 tokens: the answer takes 2.4 s
    sent = body_bytes()

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{stack.url}/v1/chat/completions",
            content=sent,
            timeout=0.5,
            headers={"Authorization": f"Bearer {tenant.api_key}", "x-request-id": "gone-early"},
        )

    [row] = usage_rows(["gone-early"], expect=1)
    assert (row.bytes_in, row.bytes_out, row.upstream_sent) == (len(sent), 0, True)
    assert row.bandwidth_charge_micro == len(sent)
    assert row.tokens_out == 8  # the vendor answered and billed: so do we
