"""Idempotency keys through a real gateway, with the official SDKs (`extra_headers`).

Same key and body: one upstream call, one charge, the stored answer replayed (a stream byte
for byte). Another body: 409 LM-2009. Concurrent duplicates: one runs, the others get 409
LM-2009 with Retry-After: 1 (the SDKs retry and then get the replay). Keys are per account;
a refusal before the vendor or an upstream error frees the key.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import anthropic
import httpx
import openai
import pytest
from django.utils import timezone

from accounts.models import Group
from billing.models import Wallet
from gateway.idempotency import fingerprint
from gateway.models import IdempotencyRecord
from tests.support.sse import sse_events
from tests.support.stacks import own_stack
from tests.support.usage import settled, usage_rows
from tests.support.waits import wait_until

HELLO = [{"role": "user", "content": "hello there"}]  # 2 prompt tokens; answers are 8
ANSWER = "Hello from the stub model gpt-4o-mini reply ok"
CHAT_COST = 6  # gpt-4o-mini: 2 x 0.15 + 8 x 0.60 = 5.1 micro-USD, rounded up
CLAUDE_COST = 34  # claude-3-5-haiku: 2 x 0.80 + 8 x 4.00 = 33.6 micro-USD, rounded up
WALLET = 1_000_000
SLOW = {"kind": "slow", "delay_ms": 100, "times": 50}  # 8 tokens x 100 ms: 0.8 s per answer
BRISK = {"kind": "slow", "delay_ms": 40, "times": 50}  # 0.32 s: well inside Retry-After: 1


def key_header(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def new_key() -> str:
    return f"idem-{uuid.uuid4().hex}"


def retrying_openai(stack, tenant, retries: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=tenant.api_key, max_retries=retries)


def retrying_anthropic(stack, tenant, retries: int) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key=tenant.api_key, max_retries=retries)


def quiesce(stack) -> None:
    """Let every row journaled so far be stored: a witness request's row lands after them."""
    witness = stack.tenant()
    response = httpx.post(
        f"{stack.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {witness.api_key}"},
        json={"model": "gpt-4o-mini", "messages": HELLO},
    )
    assert response.status_code == 200
    usage_rows(group_id=witness.group_id, expect=1)


def assert_books(tenant, *, spent_micro: int) -> None:
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        spent_micro,
        spent_micro,
        0,
    )
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET - spent_micro, 0)


def records(tenant) -> list[tuple]:
    return list(
        IdempotencyRecord.objects.filter(account_id=tenant.account_id)
        .order_by("id")
        .values_list("key", "state", "request_id", "status")
    )


# ---------------------------------------------------------------- one call, one charge


def test_openai_same_key_and_body_calls_the_vendor_once_and_replays_the_json(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    client = stack.openai(tenant)
    key = new_key()

    def ask():
        return client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=HELLO, extra_headers=key_header(key)
        )

    first, second, third = ask(), ask(), ask()

    assert first.http_response.content == second.http_response.content
    assert second.http_response.content == third.http_response.content
    assert second.parse().choices[0].message.content == ANSWER
    assert second.parse().usage.completion_tokens == 8
    first_id = first.headers["x-tollgate-request-id"]
    assert "idempotent-replayed" not in first.headers
    for replayed in (second, third):
        assert replayed.status_code == 200
        assert replayed.headers["idempotent-replayed"] == "true"
        assert replayed.headers["x-tollgate-original-request-id"] == first_id
        assert replayed.headers["content-type"] == "application/json"
        assert replayed.headers["x-tollgate-request-id"] != first_id  # every request its own id
    assert len(stack.stub.vendor_calls()) == 1
    quiesce(stack)
    rows = settled(tenant, 1)
    assert [(r.request_id, r.status, r.provider_cost_micro) for r in rows] == [
        (first_id, 200, CHAT_COST)
    ]
    assert_books(tenant, spent_micro=CHAT_COST)
    assert records(tenant) == [(key, "done", first_id, 200)]


def test_requests_without_a_key_leave_no_record(stack):
    tenant = stack.tenant()
    client = stack.openai(tenant)

    for _ in range(2):
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert len(stack.stub.vendor_calls()) == 2
    assert records(tenant) == []


def test_openai_stream_replays_the_same_sse_bytes(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    client = stack.openai(tenant)
    key = new_key()
    args = {
        "model": "gpt-4o-mini",
        "messages": HELLO,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_headers": key_header(key),
    }

    def raw() -> tuple[httpx.Headers, bytes]:
        with client.chat.completions.with_streaming_response.create(**args) as response:
            return response.headers, b"".join(response.iter_bytes())

    first_headers, first = raw()
    chunks = list(client.chat.completions.create(**args))  # the SDK parses the replay
    replay_headers, replayed = raw()

    assert replayed == first
    assert sse_events(replayed.decode()) == sse_events(first.decode())
    assert sse_events(first.decode())[-1] == ("", "[DONE]")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 8)
    assert replay_headers["content-type"].startswith("text/event-stream")
    assert replay_headers["idempotent-replayed"] == "true"
    assert (
        replay_headers["x-tollgate-original-request-id"] == (first_headers["x-tollgate-request-id"])
    )
    assert [(c["path"], c["stream"]) for c in stack.stub.vendor_calls()] == [
        ("/v1/chat/completions", True)
    ]
    quiesce(stack)
    rows = settled(tenant, 1)
    assert [(r.status, r.streamed, r.provider_cost_micro) for r in rows] == [(200, True, CHAT_COST)]
    assert_books(tenant, spent_micro=CHAT_COST)


def test_anthropic_messages_replay_json_and_stream(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    client = stack.anthropic(tenant)
    json_key, stream_key = new_key(), new_key()

    def ask():
        return client.messages.with_raw_response.create(
            model="claude-3-5-haiku",
            max_tokens=50,
            messages=HELLO,
            extra_headers=key_header(json_key),
        )

    def raw_stream() -> bytes:
        with client.messages.with_streaming_response.create(
            model="claude-3-5-haiku",
            max_tokens=50,
            messages=HELLO,
            stream=True,
            extra_headers=key_header(stream_key),
        ) as response:
            return b"".join(response.iter_bytes())

    first, second = ask(), ask()
    first_stream = raw_stream()
    events = list(
        client.messages.create(
            model="claude-3-5-haiku",
            max_tokens=50,
            messages=HELLO,
            stream=True,
            extra_headers=key_header(stream_key),
        )
    )
    second_stream = raw_stream()

    assert second.http_response.content == first.http_response.content
    assert second.headers["idempotent-replayed"] == "true"
    message = second.parse()
    assert (message.usage.input_tokens, message.usage.output_tokens) == (2, 8)
    assert second_stream == first_stream
    names = [name for name, _ in sse_events(first_stream.decode())]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert [e.type for e in events] == names
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == message.content[0].text
    assert [(c["path"], c["stream"]) for c in stack.stub.vendor_calls()] == [
        ("/v1/messages", False),
        ("/v1/messages", True),
    ]
    quiesce(stack)
    rows = settled(tenant, 2)
    assert sorted((r.streamed, r.status, r.provider_cost_micro) for r in rows) == [
        (False, 200, CLAUDE_COST),
        (True, 200, CLAUDE_COST),
    ]
    assert_books(tenant, spent_micro=2 * CLAUDE_COST)


# ---------------------------------------------------------------- conflicts and scope


def test_same_key_with_another_body_or_endpoint_is_409_and_not_retried(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    client = retrying_openai(stack, tenant, 2)  # x-should-retry: false stops the SDK
    key = new_key()
    client.chat.completions.create(
        model="gpt-4o-mini", messages=HELLO, extra_headers=key_header(key)
    )

    with pytest.raises(openai.ConflictError) as other_body:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "something else"}],
            extra_headers=key_header(key),
        )
    with pytest.raises(anthropic.ConflictError) as other_endpoint:
        retrying_anthropic(stack, tenant, 2).messages.create(
            model="gpt-4o-mini", max_tokens=50, messages=HELLO, extra_headers=key_header(key)
        )

    for refused in (other_body.value.response, other_endpoint.value.response):
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "LM-2009"
        assert refused.headers["x-should-retry"] == "false"
        assert "retry-after" not in refused.headers
    assert len(stack.stub.vendor_calls()) == 1
    rows = settled(tenant, 3)
    assert sorted((r.status, r.error_code, r.provider_cost_micro) for r in rows) == [
        (200, "", CHAT_COST),
        (409, "LM-2009", 0),
        (409, "LM-2009", 0),
    ]
    assert_books(tenant, spent_micro=CHAT_COST)


def test_one_key_in_two_accounts_runs_twice(stack):
    alice = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    bob = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    key = new_key()

    answers = [
        stack.openai(tenant).chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=HELLO, extra_headers=key_header(key)
        )
        for tenant in (alice, bob)
    ]

    assert [a.status_code for a in answers] == [200, 200]
    assert ["idempotent-replayed" in a.headers for a in answers] == [False, False]
    assert len(stack.stub.vendor_calls()) == 2
    for tenant, answer in zip((alice, bob), answers, strict=True):
        [row] = settled(tenant, 1)
        assert row.request_id == answer.headers["x-tollgate-request-id"]
        assert_books(tenant, spent_micro=CHAT_COST)
        assert records(tenant) == [(key, "done", row.request_id, 200)]


def test_invalid_keys_are_refused_before_anything_runs(stack):
    tenant = stack.tenant()
    for key in (b"", b"x" * 256, "caf\u00e9".encode("latin-1"), b"tab\tbed"):
        response = httpx.post(
            f"{stack.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {tenant.api_key}", "Idempotency-Key": key},
            content=b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}',
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "LM-2001"
    ok = httpx.post(
        f"{stack.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {tenant.api_key}", "Idempotency-Key": "x" * 255},
        json={"model": "gpt-4o-mini", "messages": HELLO},
    )
    assert ok.status_code == 200
    assert len(stack.stub.vendor_calls()) == 1
    assert [r[:2] for r in records(tenant)] == [("x" * 255, "done")]


# ---------------------------------------------------------------- concurrent duplicates


async def _burst(url: str, api_key: str, key: str, count: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {api_key}", **key_header(key)}
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{url}/v1/chat/completions",
                    headers=headers,
                    json={"model": "gpt-4o-mini", "messages": HELLO},
                )
                for _ in range(count)
            )
        )


def test_concurrent_duplicates_one_runs_the_others_get_409_then_the_replay(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    stack.stub.faults(SLOW)
    key = new_key()

    responses = asyncio.run(_burst(stack.url, tenant.api_key, key, 5))

    ran = [r for r in responses if r.status_code == 200]
    waiting = [r for r in responses if r.status_code != 200]
    assert len(ran) == 1
    assert [(r.status_code, r.json()["error"]["code"]) for r in waiting] == [(409, "LM-2009")] * 4
    assert {(r.headers["retry-after"], r.headers["x-should-retry"]) for r in waiting} == {
        ("1", "true")
    }
    assert {r.json()["error"]["message"] for r in waiting} == {
        "A request with this Idempotency-Key is in progress; retry shortly."
    }
    later = asyncio.run(_burst(stack.url, tenant.api_key, key, 1))[0]
    assert later.status_code == 200 and later.content == ran[0].content
    assert later.headers["idempotent-replayed"] == "true"
    assert len(stack.stub.vendor_calls()) == 1
    rows = settled(tenant, 5)
    assert (
        sorted((r.status, r.provider_cost_micro) for r in rows)
        == [(200, CHAT_COST)] + [(409, 0)] * 4
    )
    assert_books(tenant, spent_micro=CHAT_COST)


def test_concurrent_sdk_duplicates_all_get_the_one_answer_by_retrying(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    stack.stub.faults(BRISK)
    key = new_key()
    client = retrying_openai(stack, tenant, 3)  # the SDK honours Retry-After: 1

    def ask(_):
        return client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=HELLO, extra_headers=key_header(key)
        )

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, range(4)))

    assert len({a.http_response.content for a in answers}) == 1
    assert sorted("idempotent-replayed" in a.headers for a in answers) == [False, True, True, True]
    assert answers[0].parse().choices[0].message.content == ANSWER
    assert len(stack.stub.vendor_calls()) == 1
    rows = settled(tenant, 4)  # each waiter: one 409, then the replay a second later
    quiesce(stack)
    rows = usage_rows(group_id=tenant.group_id)
    assert (
        sorted((r.status, r.error_code, r.provider_cost_micro) for r in rows)
        == [(200, "", CHAT_COST)] + [(409, "LM-2009", 0)] * 3
    )
    assert_books(tenant, spent_micro=CHAT_COST)


# ---------------------------------------------------------------- what frees a key


def test_a_refusal_before_the_vendor_frees_the_key(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=0)  # LM-4001 after the claim
    client = stack.openai(tenant)
    key = new_key()

    def ask(model: str = "gpt-4o-mini"):
        return client.chat.completions.with_raw_response.create(
            model=model, messages=HELLO, extra_headers=key_header(key)
        )

    with pytest.raises(openai.APIStatusError) as no_budget:
        ask()
    with pytest.raises(openai.BadRequestError) as unknown_model:
        ask("no-such-model")
    assert records(tenant) == []
    Group.objects.filter(pk=tenant.group_id).update(budget_max_micro=WALLET)
    stack.gateway.reload()
    served = ask()
    replayed = ask()

    assert (no_budget.value.status_code, no_budget.value.body["code"]) == (402, "LM-4001")
    assert unknown_model.value.body["code"] == "LM-2001"
    assert "idempotent-replayed" not in served.headers
    assert replayed.headers["idempotent-replayed"] == "true"
    assert len(stack.stub.vendor_calls()) == 1
    rows = settled(tenant, 3)
    assert sorted((r.status, r.error_code, r.provider_cost_micro) for r in rows) == [
        (200, "", CHAT_COST),
        (400, "LM-2001", 0),
        (402, "LM-4001", 0),
    ]
    assert_books(tenant, spent_micro=CHAT_COST)


def test_an_upstream_error_frees_the_key(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    client = stack.openai(tenant)
    key = new_key()
    stack.stub.faults({"kind": "500", "times": 2})  # both tries of the link

    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(
            model="gpt-4o-mini", messages=HELLO, extra_headers=key_header(key)
        )
    answer = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=HELLO, extra_headers=key_header(key)
    )

    assert (failed.value.status_code, failed.value.body["code"]) == (502, "LM-5001")
    assert "idempotent-replayed" not in answer.headers
    assert answer.parse().choices[0].message.content == ANSWER
    assert len(stack.stub.vendor_calls()) == 3
    rows = settled(tenant, 2)
    assert sorted((r.status, r.provider_cost_micro) for r in rows) == [
        (200, CHAT_COST),
        (502, 0),
    ]
    assert_books(tenant, spent_micro=CHAT_COST)
    assert [r[1:] for r in records(tenant)] == [("done", rows[-1].request_id, 200)]


# ---------------------------------------------------------------- expired, abandoned, too large


BODY = b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}]}'


def post_raw(stack, tenant, key: str) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {tenant.api_key}", **key_header(key)},
        content=BODY,
    )


def test_a_non_streamed_answer_is_kept_for_a_client_that_gave_up(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    stack.stub.faults(SLOW)
    key = new_key()

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{stack.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {tenant.api_key}", **key_header(key)},
            content=BODY,
            timeout=0.3,
        )
    wait_until(lambda: [r[1] for r in records(tenant)] == ["done"], what="the answer stored")
    retry = post_raw(stack, tenant, key)

    assert retry.status_code == 200
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["choices"][0]["message"]["content"] == ANSWER
    assert len(stack.stub.vendor_calls()) == 1
    quiesce(stack)
    rows = settled(tenant, 1)
    assert [(r.status, r.provider_cost_micro) for r in rows] == [(200, CHAT_COST)]
    assert_books(tenant, spent_micro=CHAT_COST)


def test_a_stream_the_client_left_frees_the_key(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    stack.stub.faults(SLOW)
    key = new_key()
    body = {"model": "gpt-4o-mini", "messages": HELLO, "stream": True}
    headers = {"Authorization": f"Bearer {tenant.api_key}", **key_header(key)}

    with httpx.stream(
        "POST", f"{stack.url}/v1/chat/completions", headers=headers, json=body
    ) as left:
        next(left.iter_raw())  # the first event, then the client hangs up
    wait_until(lambda: records(tenant) == [], what="the key released")
    second = httpx.post(f"{stack.url}/v1/chat/completions", headers=headers, json=body)
    third = httpx.post(f"{stack.url}/v1/chat/completions", headers=headers, json=body)

    assert "idempotent-replayed" not in second.headers
    assert third.headers["idempotent-replayed"] == "true"
    assert third.content == second.content
    assert len(stack.stub.vendor_calls()) == 2
    quiesce(stack)
    rows = settled(tenant, 2)
    by_status = {r.status: r for r in rows}
    assert sorted(by_status) == [200, 499]
    assert by_status[200].provider_cost_micro == CHAT_COST
    assert_books(tenant, spent_micro=CHAT_COST + by_status[499].provider_cost_micro)


def test_expired_and_abandoned_records_are_taken_over(stack):
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    now = timezone.now()
    IdempotencyRecord.objects.create(  # a day old, another body: free again
        account_id=tenant.account_id,
        key="expired",
        fingerprint="0" * 64,
        state="done",
        request_id="old",
        status=200,
        headers="[]",
        body=b"stale",
        created_at=now - timedelta(days=1, seconds=1),
        expires_at=now - timedelta(seconds=1),
    )
    IdempotencyRecord.objects.create(  # its gateway died mid-request (deadline 240 s)
        account_id=tenant.account_id,
        key="abandoned",
        fingerprint=fingerprint("chat", BODY),
        state="running",
        request_id="dead",
        headers="",
        created_at=now - timedelta(seconds=301),
        expires_at=now + timedelta(hours=23),
    )
    IdempotencyRecord.objects.create(  # still within its deadline: in progress
        account_id=tenant.account_id,
        key="running",
        fingerprint=fingerprint("chat", BODY),
        state="running",
        request_id="alive",
        headers="",
        created_at=now - timedelta(seconds=200),
        expires_at=now + timedelta(hours=23),
    )

    expired, abandoned, running = (
        post_raw(stack, tenant, key) for key in ("expired", "abandoned", "running")
    )

    assert (expired.status_code, abandoned.status_code) == (200, 200)
    assert (running.status_code, running.json()["error"]["code"]) == (409, "LM-2009")
    assert len(stack.stub.vendor_calls()) == 2
    assert records(tenant) == [
        ("expired", "done", expired.headers["x-tollgate-request-id"], 200),
        ("abandoned", "done", abandoned.headers["x-tollgate-request-id"], 200),
        ("running", "running", "alive", None),
    ]
    settled(tenant, 3)
    assert_books(tenant, spent_micro=2 * CHAT_COST)


def test_a_claim_sweeps_expired_records_of_any_account(stack):
    other = stack.tenant()
    tenant = stack.tenant()
    past = timezone.now() - timedelta(seconds=1)
    IdempotencyRecord.objects.bulk_create(
        IdempotencyRecord(
            account_id=other.account_id,
            key=f"old-{n}",
            fingerprint="0" * 64,
            state="done",
            request_id=f"r{n}",
            status=200,
            headers="[]",
            body=b"",
            created_at=past - timedelta(days=1),
            expires_at=past,
        )
        for n in range(6)
    )

    assert post_raw(stack, tenant, new_key()).status_code == 200

    assert IdempotencyRecord.objects.filter(account_id=other.account_id).count() == 2  # 4 swept


def test_an_answer_over_the_cap_is_served_once_and_never_run_again(
    transactional_db, spawn_gateway, stub
):
    gateway = spawn_gateway(TOLLGATE_IDEMPOTENCY_MAX_BYTES="100")
    stack = own_stack(gateway, stub)
    tenant = stack.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    key = new_key()

    first, second = post_raw(stack, tenant, key), post_raw(stack, tenant, key)

    assert first.status_code == 200 and len(first.content) > 100
    assert (second.status_code, second.json()["error"]["code"]) == (409, "LM-2009")
    assert second.headers["x-should-retry"] == "false"
    assert len(stack.stub.vendor_calls()) == 1
    assert records(tenant) == [(key, "too_large", first.headers["x-tollgate-request-id"], 200)]
    settled(tenant, 2)
    assert_books(tenant, spent_micro=CHAT_COST)
