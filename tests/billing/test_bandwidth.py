"""Bandwidth metering: body bytes in and out, SSE included, charged once, only if sent upstream."""

from __future__ import annotations

import json

import httpx
import pytest

from accounts.models import ApiKey, Group
from billing.money import bandwidth_charge_micro
from tests.conftest import usage_rows, wait_until

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
