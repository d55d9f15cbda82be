"""POST /v1/messages/count_tokens through a real gateway, with the official anthropic SDK.

An anthropic-kind profile's count comes from the vendor, asked with the key a chat request
would use (a team key before the platform key); any other profile's, or a failed or slow
vendor call's, is Tollgate's estimate. Either way nothing is billed or recorded.

The vendor here is a small aiohttp server of the test's own that answers count_tokens and
keeps what it was sent.
"""

from __future__ import annotations

import asyncio
import threading
import time

import anthropic
import httpx
import pytest
from aiohttp import web

from tests.byok.helpers import Byok, team_keys
from tests.support.processes import free_port
from tests.support.profiles import PLATFORM_KEY, install_profiles, stub_profiles
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows

VENDOR_TOKENS = 4321
PROMPT = [{"role": "user", "content": "Hello there, gateway"}]  # 20 bytes: estimate 5


class CountVendor:
    """Anthropic's count-tokens route, recording each call's path, key and body."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.status = 200
        self.delay_s = 0.0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _count(self, request: web.Request) -> web.Response:
        self.calls.append(
            {
                "path": request.path,
                "key": request.headers.get("x-api-key"),
                "version": request.headers.get("anthropic-version"),
                "body": await request.json(),
            }
        )
        await asyncio.sleep(self.delay_s)
        if self.status != 200:
            error = {"type": "error", "error": {"type": "api_error", "message": "vendor says no"}}
            return web.json_response(error, status=self.status)
        return web.json_response({"input_tokens": VENDOR_TOKENS})

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/messages/count_tokens", self._count)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    def start(self) -> CountVendor:
        self._thread.start()
        assert self._started.wait(10), "the count vendor did not start"
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def reset(self) -> None:
        self.calls.clear()
        self.status, self.delay_s = 200, 0.0


@pytest.fixture(scope="module")
def vendor():
    server = CountVendor().start()
    yield server
    server.stop()


def count_profiles(stub_url: str, vendor_url: str) -> list[dict]:
    anthropic_model = {
        "name": "claude-count",
        "upstream": "claude-count-20250101",
        "aliases": ["claude-count-latest"],
        "input_micro_per_mtok": 800_000,
        "output_micro_per_mtok": 4_000_000,
    }
    return [
        *stub_profiles(stub_url),
        {
            "name": "count-anthropic",
            "kind": "anthropic",
            "base_url": vendor_url,
            "timeout_s": 30,
            "models": [anthropic_model],
        },
        {
            "name": "count-closed",
            "kind": "anthropic",
            "base_url": vendor_url,
            "allows_platform": False,
            "models": [{**anthropic_model, "name": "claude-closed", "aliases": []}],
        },
    ]


@pytest.fixture
def counting(stack, vendor):
    vendor.reset()
    install_profiles(stack.stub.url, count_profiles(stack.stub.url, vendor.url))
    stack.gateway.reload()
    return stack


def count(stack, tenant, body: dict) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/messages/count_tokens",
        json=body,
        timeout=30,
        headers={"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"},
    )


def error_code(response: httpx.Response, default: str) -> str:
    # The code is in our error body; Anthropic's error shape may carry it elsewhere or not.
    return response.json()["error"].get("code", default)


def test_the_sdk_gets_the_vendors_count_asked_with_the_platform_key(counting, vendor):
    tenant = counting.tenant()

    result = counting.anthropic(tenant).messages.with_raw_response.count_tokens(
        model="claude-count", messages=PROMPT
    )

    assert result.parse().input_tokens == VENDOR_TOKENS
    assert result.headers["x-tollgate-count"] == "vendor"
    [call] = vendor.calls
    assert (call["path"], call["key"], call["version"]) == (
        "/v1/messages/count_tokens",
        PLATFORM_KEY,
        "2023-06-01",
    )
    assert call["body"] == {"model": "claude-count-20250101", "messages": PROMPT}
    assert counting.stub.vendor_calls() == []


def test_the_vendor_gets_the_upstream_name_without_tollgates_fields(counting, vendor):
    tenant = counting.tenant()
    body = {
        "model": "claude-count-latest",
        "fallback_model": "gpt-4o-mini",
        "metadata": {"user_id": "end-user-7"},
        "system": "Be brief.",
        "messages": PROMPT,
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }

    response = count(counting, tenant, body)

    assert response.status_code == 200, response.text
    assert response.json() == {"input_tokens": VENDOR_TOKENS}
    [call] = vendor.calls
    assert call["body"] == {
        "model": "claude-count-20250101",
        "system": "Be brief.",
        "messages": PROMPT,
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }


def test_a_group_with_team_keys_is_counted_with_a_team_key(counting, vendor):
    tenant = counting.tenant()
    team_keys(counting, tenant, "count-anthropic", ["sk-team-count-1"])

    answer = counting.anthropic(tenant).messages.count_tokens(model="claude-count", messages=PROMPT)

    assert answer.input_tokens == VENDOR_TOKENS
    assert [c["key"] for c in vendor.calls] == ["sk-team-count-1"]


def test_an_emptied_pool_without_fallback_is_estimated_never_asked_with_the_platform_key(
    counting, vendor
):
    tenant = counting.tenant()
    [key_id] = team_keys(counting, tenant, "count-anthropic", ["sk-team-count-1"], fallback=False)
    assert Byok(counting, tenant).delete(key_id).status_code == 204

    response = count(counting, tenant, {"model": "claude-count", "messages": PROMPT})

    assert (response.json(), response.headers["x-tollgate-count"]) == (
        {"input_tokens": 5},
        "estimate",
    )
    assert vendor.calls == []


def test_a_profile_closed_to_platform_serving_is_estimated(counting, vendor):
    tenant = counting.tenant()

    response = count(counting, tenant, {"model": "claude-closed", "messages": PROMPT})

    assert response.headers["x-tollgate-count"] == "estimate"
    assert response.json() == {"input_tokens": 5}
    assert vendor.calls == []


def test_with_platform_serving_off_a_group_without_team_keys_is_estimated(
    transactional_db, spawn_gateway, stub, vendor
):
    vendor.reset()
    stack = own_stack(
        spawn_gateway(GATEWAY_PTB_ENABLED="false"), stub, count_profiles(stub.url, vendor.url)
    )
    tenant = stack.tenant()

    response = count(stack, tenant, {"model": "claude-count", "messages": PROMPT})

    assert response.headers["x-tollgate-count"] == "estimate"
    assert vendor.calls == []
    team_keys(stack, tenant, "count-anthropic", ["sk-team-count-1"])
    response = count(stack, tenant, {"model": "claude-count", "messages": PROMPT})
    assert response.headers["x-tollgate-count"] == "vendor"
    assert [c["key"] for c in vendor.calls] == ["sk-team-count-1"]


def test_an_openai_profile_is_estimated_with_exact_numbers(counting, vendor):
    tenant = counting.tenant()
    client = counting.anthropic(tenant)

    # "Be brief." 9 bytes + 20 bytes of prompt: ceil(29 / 4) = 8.
    plain = client.messages.with_raw_response.count_tokens(
        model="gpt-4o-mini", system="Be brief.", messages=PROMPT
    )
    # Plus an image: 1,600 more; and a route list counts for its first model.
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
    }
    with_image = client.messages.count_tokens(
        model="gpt-4o-mini,claude-count",
        system="Be brief.",
        messages=[
            {"role": "user", "content": [{"type": "text", "text": PROMPT[0]["content"]}, image]}
        ],
    )

    assert (plain.parse().input_tokens, plain.headers["x-tollgate-count"]) == (8, "estimate")
    assert with_image.input_tokens == 8 + 1_600
    assert vendor.calls == [] and counting.stub.vendor_calls() == []


def test_a_failing_vendor_is_answered_with_the_estimate(counting, vendor):
    tenant = counting.tenant()
    vendor.status = 500

    response = count(counting, tenant, {"model": "claude-count", "messages": PROMPT})

    assert response.status_code == 200
    assert (response.json(), response.headers["x-tollgate-count"]) == (
        {"input_tokens": 5},
        "estimate",
    )
    assert len(vendor.calls) == 1


def test_a_vendor_slower_than_5_s_is_answered_with_the_estimate(counting, vendor):
    tenant = counting.tenant()
    vendor.delay_s = 8

    started = time.monotonic()
    response = count(counting, tenant, {"model": "claude-count", "messages": PROMPT})

    assert 4.9 < time.monotonic() - started < 7.5
    assert (response.json(), response.headers["x-tollgate-count"]) == (
        {"input_tokens": 5},
        "estimate",
    )


def test_unknown_forbidden_and_unauthenticated_counts_are_refused(counting, vendor):
    from accounts.models import ApiKey

    tenant = counting.tenant()
    client = counting.anthropic(tenant)

    with pytest.raises(anthropic.BadRequestError) as unknown:
        client.messages.count_tokens(model="no-such-model", messages=PROMPT)
    assert error_code(unknown.value.response, "LM-2001") == "LM-2001"

    ApiKey.objects.filter(pk=tenant.api_key_id).update(allowed_models=["gpt-4o-mini"])
    counting.gateway.reload()
    with pytest.raises(anthropic.PermissionDeniedError) as forbidden:
        client.messages.count_tokens(model="claude-count-latest", messages=PROMPT)
    assert error_code(forbidden.value.response, "LM-1003") == "LM-1003"
    # The alias is allowed through its canonical name, like a chat request.
    ApiKey.objects.filter(pk=tenant.api_key_id).update(allowed_models=["claude-count"])
    counting.gateway.reload()
    assert client.messages.count_tokens(model="claude-count-latest", messages=PROMPT).input_tokens

    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url=counting.url, api_key="tg-not-a-key", max_retries=0
        ).messages.count_tokens(model="claude-count", messages=PROMPT)
    malformed = count(counting, tenant, {"model": "claude-count", "messages": "hi"})
    assert malformed.status_code == 400
    assert [c["key"] for c in vendor.calls] == [PLATFORM_KEY]


def test_counting_is_never_billed_or_recorded(counting, vendor):
    from billing.models import Reservation, Wallet

    tenant = counting.tenant()
    wallet_before = Wallet.objects.get(account_id=tenant.account_id).balance_micro
    for model in ("claude-count", "gpt-4o-mini"):
        assert count(counting, tenant, {"model": model, "messages": PROMPT}).status_code == 200
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == wallet_before
    assert Reservation.objects.count() == 0

    # A chat afterwards is the group's only row once it is stored.
    counting.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=PROMPT)
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert row.endpoint == "chat"
