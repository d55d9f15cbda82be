"""A rotated key through a real gateway with the official openai SDK: through the grace both
secrets are the same key (one rate counter, one key id on every usage row), then the old one
is LM-1001 and the new one goes on."""

from __future__ import annotations

import secrets
import time

import openai
import pytest
from django.utils.dateparse import parse_datetime
from openai.types.chat import ChatCompletionMessageParam
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiKey
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def ask(client: openai.OpenAI) -> str:
    """Return the request id of a served completion."""
    response = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=HELLO, max_tokens=10
    )
    response.parse()
    return response.headers["x-request-id"]


def refusal(client: openai.OpenAI) -> tuple[int, str] | None:
    """Return (status, code) of a refused request; None if it was served."""
    try:
        ask(client)
    except openai.APIStatusError as refused:
        assert isinstance(refused.body, dict), refused.body
        return refused.status_code, refused.body["code"]
    return None


def tenant_api(tenant) -> APIClient:
    """The tenant API in this process, from an address of its own (a random /64): other
    tests' wrong tokens from 127.0.0.1 may have it locked out (accounts/throttle.py)."""
    address = f"2001:db8:{secrets.randbits(16):x}:{secrets.randbits(16):x}::1"
    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return api


def test_both_secrets_are_one_key_through_the_grace_then_the_old_one_is_lm_1001(
    fresh_window_stack,
):
    stack = fresh_window_stack
    tenant = stack.tenant()
    services.api_key_update(api_key=ApiKey.objects.get(pk=tenant.api_key_id), rpm_limit=4)
    old = stack.openai(tenant)
    served = [ask(old)]  # the old secret is now in the gateway's memory

    api = tenant_api(tenant)
    rotated = api.post(f"/api/keys/{tenant.api_key_id}/rotate", {"grace_s": 3}, "json").json()
    grace_end = parse_datetime(rotated["previous_valid_until"]).timestamp()
    new = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=rotated["secret"], max_retries=0)

    served += [ask(old), ask(new), ask(new)]
    # One key, one counter: the fifth request this minute is over the key's 4 rpm on either.
    assert refusal(old) == (429, "LM-3001")
    assert time.time() < grace_end, "the grace ended before the old secret's checks ran"

    rows = usage_rows(served, expect=4)
    assert [row.api_key_id for row in rows] == [tenant.api_key_id] * 4
    assert len({row.group_id for row in rows}) == 1

    wait_until(lambda: refusal(old) == (401, "LM-1001"), timeout_s=10, what="old refused")
    refused_after_s = time.time() - grace_end
    assert refused_after_s < 5
    print(f"old secret refused {refused_after_s:.3f} s after its grace ended")
    assert refusal(new) == (429, "LM-3001")  # still the same key, still over its rpm


def test_a_rotation_with_no_grace_refuses_the_old_secret_on_the_next_request(stack):
    tenant = stack.tenant()
    old = stack.openai(tenant)
    ask(old)  # cached

    api = tenant_api(tenant)
    rotated = api.post(f"/api/keys/{tenant.api_key_id}/rotate", {"grace_s": 0}, "json").json()

    assert refusal(old) == (401, "LM-1001")
    new = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=rotated["secret"], max_retries=0)
    assert usage_rows([ask(new)], expect=1)[0].api_key_id == tenant.api_key_id


@pytest.mark.parametrize("then", ["revoke", "rotate again"])
def test_a_revoke_or_second_rotation_ends_a_cached_secret_in_grace_at_once(stack, then):
    tenant = stack.tenant()
    api = tenant_api(tenant)
    rotated = api.post(f"/api/keys/{tenant.api_key_id}/rotate", {"grace_s": 600}, "json").json()
    old = stack.openai(tenant)
    ask(old)  # the secret in grace, now in the gateway's memory

    if then == "revoke":
        api.post(f"/api/keys/{tenant.api_key_id}/revoke")
    else:
        api.post(f"/api/keys/{tenant.api_key_id}/rotate", {"grace_s": 600}, "json")

    assert refusal(old) == (401, "LM-1001")
    new = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=rotated["secret"], max_retries=0)
    assert (refusal(new) is None) == (then == "rotate again")


def test_a_change_to_the_key_reaches_its_secret_in_grace_at_once(stack):
    tenant = stack.tenant()
    api = tenant_api(tenant)
    api.post(f"/api/keys/{tenant.api_key_id}/rotate", {"grace_s": 600}, "json")
    old = stack.openai(tenant)
    ask(old)  # the secret in grace, now in the gateway's memory

    api.patch(f"/api/keys/{tenant.api_key_id}", {"allowed_models": ["claude-3-5-haiku"]}, "json")

    assert refusal(old) == (403, "LM-1003")  # the same key, narrowed
