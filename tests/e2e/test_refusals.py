"""Refusals before any vendor sees the request: status, code, and no upstream call."""

from __future__ import annotations

from datetime import timedelta

import anthropic
import httpx
import openai
import pytest
from django.utils import timezone

from tests.support.services import requires_redis
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def post(stack, *, key: str | None = None, json=None, content=None, headers=None):
    headers = dict(headers or {})
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(
        f"{stack.url}/v1/chat/completions",
        headers=headers,
        json=json if content is None else None,
        content=content,
    )


def assert_refused(response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert set(error) == {"message", "type", "code"}


def test_missing_key_is_lm_1001(stack):
    assert_refused(post(stack, json=BODY), 401, "LM-1001")


def test_unknown_key_is_lm_1001(stack):
    assert_refused(post(stack, key="tg-not-a-real-key", json=BODY), 401, "LM-1001")


def test_revoked_key_is_lm_1001(stack):
    from accounts.models import ApiKey
    from accounts.services import api_key_revoke

    tenant = stack.tenant()
    api_key_revoke(api_key=ApiKey.objects.get(pk=tenant.api_key_id))

    assert_refused(post(stack, key=tenant.api_key, json=BODY), 401, "LM-1001")
    assert stack.stub.vendor_calls() == []


@requires_redis
def test_revoking_a_cached_key_reaches_the_running_gateway(stack):
    from accounts.models import ApiKey
    from accounts.services import api_key_revoke

    tenant = stack.tenant()
    assert post(stack, key=tenant.api_key, json=BODY).status_code == 200  # now cached
    api_key_revoke(api_key=ApiKey.objects.get(pk=tenant.api_key_id))

    response = wait_until(
        lambda: (r := post(stack, key=tenant.api_key, json=BODY)).status_code == 401 and r,
        timeout_s=5,
        what="the revocation to reach the gateway",
    )
    assert_refused(response, 401, "LM-1001")
    assert len(stack.stub.vendor_calls()) == 1


def test_expired_key_is_lm_1001(stack):
    from accounts.models import ApiKey

    tenant = stack.tenant()
    ApiKey.objects.filter(pk=tenant.api_key_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert_refused(post(stack, key=tenant.api_key, json=BODY), 401, "LM-1001")


def test_tenant_api_token_buys_no_tokens(stack):
    tenant = stack.tenant()
    assert_refused(post(stack, key=tenant.api_token, json=BODY), 401, "LM-1001")


def test_virtual_key_cannot_call_the_tenant_api(stack):
    tenant = stack.tenant()
    for header in (f"Token {tenant.api_key}", f"Bearer {tenant.api_key}"):
        response = httpx.get(f"{stack.url}/api/groups", headers={"Authorization": header})
        assert_refused(response, 401, "LM-1001")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"model": "gpt-4o-mini"}', "messages"),
        (
            b'{"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}',
            "Unknown model",
        ),
        (
            b'{"model": "gpt-4o-mini", "max_tokens": -5, '
            b'"messages": [{"role": "user", "content": "x"}]}',
            "max_tokens",
        ),
        (
            b'{"model": "gpt-4o-mini", "vendor_knob": 1, '
            b'"messages": [{"role": "user", "content": "x"}]}',
            "'vendor_knob' is not a field Tollgate knows, and profile stub-openai does not "
            "pass unknown fields through.",
        ),
    ],
)
def test_invalid_body_is_lm_2001(stack, body, fragment):
    tenant = stack.tenant()
    response = post(
        stack, key=tenant.api_key, content=body, headers={"content-type": "application/json"}
    )
    assert_refused(response, 400, "LM-2001")
    assert fragment in response.json()["error"]["message"]
    assert stack.stub.vendor_calls() == []


def test_oversized_body_is_lm_2013(stack):
    tenant = stack.tenant()
    huge = {**BODY, "messages": [{"role": "user", "content": "x" * 1_100_000}]}
    assert_refused(post(stack, key=tenant.api_key, json=huge), 413, "LM-2013")
    assert stack.stub.vendor_calls() == []


def test_refusals_are_logged_but_not_billed(stack):
    tenant = stack.tenant()
    response = post(
        stack,
        key=tenant.api_key,
        json={"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
    )
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (row.status, row.error_code, row.upstream_sent, row.bandwidth_charge_micro) == (
        400,
        "LM-2001",
        False,
        0,
    )


def test_request_id_is_taken_from_the_client_and_echoed(stack):
    tenant = stack.tenant()
    response = post(stack, key=tenant.api_key, json=BODY, headers={"x-request-id": "my-req-1"})
    assert response.headers["x-request-id"] == "my-req-1"
    [row] = usage_rows(["my-req-1"], expect=1)
    assert row.status == 200


def test_an_sdk_given_the_bare_host_is_told_the_base_url_in_json(stack):
    """The OpenAI SDK pointed at the host without /v1 posts /chat/completions: it reads our
    error, not an HTML page it can only show as "Error code: 404"."""
    tenant = stack.tenant()
    bare = openai.OpenAI(base_url=stack.url, api_key=tenant.api_key, max_retries=0)

    with pytest.raises(openai.NotFoundError) as refused:
        bare.chat.completions.create(**BODY)

    host = stack.url.removeprefix("http://")
    assert refused.value.body == {
        "message": "No route POST /chat/completions. The base URL is missing /v1. Point the"
        f" OpenAI SDK at base URL http://{host}/v1 and the Anthropic SDK at http://{host} (it"
        " adds /v1 itself); the models are listed at GET /v1/models.",
        "type": "invalid_request_error",
        "code": "LM-2004",
    }
    # Pages of the control plane on the same port are still Django's.
    assert httpx.get(f"{stack.url}/login/").status_code == 200
    assert stack.stub.vendor_calls() == []


def test_the_anthropic_sdk_given_v1_is_told_it_adds_v1_itself(stack):
    tenant = stack.tenant()
    doubled = anthropic.Anthropic(base_url=f"{stack.url}/v1", api_key=tenant.api_key, max_retries=0)

    with pytest.raises(anthropic.BadRequestError) as refused:
        doubled.messages.create(
            model="claude-3-5-haiku", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )

    message = refused.value.body["error"]["message"]
    assert message.startswith("No route POST /v1/v1/messages. The base URL ends in /v1 and")
    assert f"the Anthropic SDK at {stack.url} (it adds /v1 itself)" in message


def test_a_misspelt_model_names_the_nearest_and_the_model_list(stack):
    tenant = stack.tenant()

    with pytest.raises(openai.BadRequestError) as refused:
        stack.openai(tenant).chat.completions.create(**{**BODY, "model": "gpt-4o-mnii"})

    assert refused.value.body["code"] == "LM-2001"
    assert refused.value.body["message"] == (
        "Unknown model 'gpt-4o-mnii'. Did you mean 'gpt-4o-mini'?"
        " GET /v1/models lists the models this key may use."
    )
