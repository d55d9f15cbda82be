"""Request tags end to end through the official SDKs and a real gateway: the header's and
`metadata.tags` land on the usage row in order, then the key's and group's defaults; the
vendor never sees `metadata.tags`; a bad tag is LM-2001 before any vendor call and bills
nothing; the tenant API's tag filter and totals are exact and never cross accounts."""

from __future__ import annotations

import csv
import io

import openai
import pytest
from rest_framework.test import APIClient

from tests.support.usage import streamed_body, usage_rows

PROMPT = [{"role": "user", "content": "Say hello"}]
TAGS = "X-Tollgate-Tags"


def api(tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


def set_defaults(tenant, *, key: list[str], group: list[str]) -> None:
    from accounts.models import ApiKey, Group

    ApiKey.objects.filter(pk=tenant.api_key_id).update(default_tags=key)
    Group.objects.filter(pk=tenant.group_id).update(default_tags=group)


def test_header_then_body_then_key_then_group_defaults_on_the_row(stack):
    tenant = stack.tenant()
    set_defaults(tenant, key=["team:search", "env:prod"], group=["env:prod", "org:acme"])
    response = stack.openai(tenant).chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=PROMPT,
        max_tokens=20,
        metadata={"tags": "Feature:Chat, customer-42", "trace": "t-1"},
        extra_headers={TAGS: "Release:2026.12,customer-42"},
    )
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert row.tags == [
        "release:2026.12",
        "customer-42",
        "feature:chat",
        "team:search",
        "env:prod",
        "org:acme",
    ]
    [call] = stack.stub.vendor_calls()
    assert call["body"]["metadata"] == {"trace": "t-1"}  # the rest of metadata goes on


def test_a_streamed_answer_keeps_its_tags_and_the_vendor_gets_no_metadata(stack):
    tenant = stack.tenant()
    client = stack.openai(tenant)
    stream = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=PROMPT,
        stream=True,
        metadata={"tags": "stream-me"},
    )
    list(stream.parse())
    [row] = usage_rows([stream.headers["x-request-id"]], expect=1)
    assert row.tags == ["stream-me"] and row.streamed
    [call] = stack.stub.vendor_calls()
    assert "metadata" not in call["body"]


def test_the_anthropic_sdk_sends_them_in_metadata_beside_user_id(stack):
    tenant = stack.tenant()
    response = stack.anthropic(tenant).messages.with_raw_response.create(
        model="claude-3-5-haiku",
        max_tokens=20,
        messages=PROMPT,
        metadata={"user_id": "user-1", "tags": ["a", "b"]},
    )
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert row.tags == ["a", "b"]
    [call] = stack.stub.vendor_calls()
    assert set(call["body"]["metadata"]) == {"user_id"}  # the caller label only


def test_the_responses_api_takes_them_too(stack):
    tenant = stack.tenant()
    response = stack.openai(tenant).responses.with_raw_response.create(
        model="gpt-4o-mini", input="Say hello", metadata={"tags": "resp"}
    )
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert row.tags == ["resp"]
    assert "metadata" not in stack.stub.vendor_calls()[0]["body"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"extra_headers": {TAGS: "ok,not ok"}}, "Tag 'not ok' is not valid"),
        ({"metadata": {"tags": "a/../b,Ünïcode"}}, "is not valid"),
        ({"extra_body": {"metadata": {"tags": 7}}}, "'metadata.tags' must be"),
        (
            {"extra_headers": {TAGS: ",".join(f"t{i}" for i in range(11))}},
            "At most 10 tags per request",
        ),
    ],
)
def test_a_bad_tag_is_lm_2001_before_any_vendor_call_and_bills_nothing(stack, extra, message):
    tenant = stack.tenant()
    with pytest.raises(openai.BadRequestError) as refused:
        stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=PROMPT, **extra)
    error = refused.value.body
    assert error["code"] == "LM-2001" and message in error["message"]
    assert stack.stub.vendor_calls() == []
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.status, row.provider_cost_micro, row.bandwidth_charge_micro) == (400, 0, 0)
    assert row.tags == []


def test_the_tag_filter_and_totals_are_the_callers_own_and_exact(stack):
    mine, theirs = stack.tenant(), stack.tenant()
    client = stack.openai(mine)
    ids = []
    for tags in ("shared,mine-only", "shared", ""):
        response = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=PROMPT, max_tokens=20, extra_headers={TAGS: tags}
        )
        ids.append(response.headers["x-request-id"])
    hostile = stack.openai(theirs).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=PROMPT, max_tokens=20, extra_headers={TAGS: "shared"}
    )
    rows = usage_rows([*ids, hostile.headers["x-request-id"]], expect=4)
    mine_rows = [r for r in rows if r.account_id == mine.account_id]

    listed = api(mine).get("/api/usage", {"tag": "shared"}).json()["results"]
    assert sorted(r["request_id"] for r in listed) == sorted(ids[:2])
    assert api(theirs).get("/api/usage", {"tag": "mine-only"}).json()["results"] == []
    [their_only] = api(theirs).get("/api/usage/tags").json()["results"]
    assert (their_only["tag"], their_only["requests"]) == ("shared", 1)

    totals = {t["tag"]: t for t in api(mine).get("/api/usage/tags").json()["results"]}
    assert set(totals) == {"shared", "mine-only"}
    shared = [r for r in mine_rows if "shared" in r.tags]
    assert totals["shared"]["requests"] == 2
    assert totals["shared"]["provider_cost_micro"] == sum(r.provider_cost_micro for r in shared)
    assert totals["shared"]["spend_micro"] == sum(r.spend_micro for r in shared)
    assert totals["shared"]["tokens_in"] == sum(r.tokens_in for r in shared)
    assert totals["mine-only"]["requests"] == 1

    exported = api(mine).get("/api/usage/export.csv", {"tag": "mine-only"})
    [line] = list(csv.DictReader(io.StringIO(streamed_body(exported).decode())))
    assert line["tags"] == "shared,mine-only"
