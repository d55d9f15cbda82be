"""`POST /v1/embeddings` through the official SDK: the same keys, limits and money as chat.

The stub's vectors are deterministic (stubvendor.embeddings.embedding_vector) and its
prompt tokens are the words of each text input, or the length of each token array.
"""

from __future__ import annotations

import base64
import struct

import httpx
import openai
import pytest

from billing.models import Reservation, Wallet
from core.money import TokenPrices
from stubvendor.embeddings import embedding_vector
from tests.byok.helpers import team_keys
from tests.support.profiles import EMBEDDING_PRICES, PLATFORM_KEY, api_profiles
from tests.support.stacks import own_stack
from tests.support.usage import settled

SMALL = "text-embedding-3-small"
LARGE = "text-embedding-3-large"
TEXTS = ["the quick brown fox", "jumps over", "the lazy dog"]  # 4 + 2 + 3 = 9 tokens


@pytest.fixture
def api(transactional_db, shared_gateway, stub):
    return own_stack(shared_gateway, stub, api_profiles(stub.url))


def cost(model: str, tokens: int) -> int:
    return TokenPrices.configured(
        input_micro_per_mtok=EMBEDDING_PRICES[model], output_micro_per_mtok=0
    ).cost_micro(tokens_in=tokens, tokens_out=0)


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_sdk_embeddings_are_the_vendors_vectors_and_billed_per_input_token(api, encoding):
    tenant = api.tenant()
    client = api.openai(tenant)
    # The SDK asks for base64 when not told (and decodes it itself): both ways are the vendor's.
    ask = {"encoding_format": "float"} if encoding == "float" else {}

    answer = client.embeddings.create(model=SMALL, input=TEXTS, dimensions=6, **ask)

    assert [item.embedding for item in answer.data] == [
        embedding_vector(SMALL, text, 6) for text in TEXTS
    ]
    assert [item.index for item in answer.data] == [0, 1, 2]
    assert answer.model == SMALL
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (9, 9)
    [call] = api.stub.vendor_calls()
    assert call["path"] == "/v1/embeddings"
    assert call["body"] == {
        "model": SMALL,
        "input": TEXTS,
        "dimensions": 6,
        "encoding_format": encoding,
    }
    [row] = settled(tenant, 1)
    assert (row.endpoint, row.model_served, row.served_by, row.tokens_in, row.tokens_out) == (
        "embeddings",
        SMALL,
        "platform",
        9,
        0,
    )
    assert row.provider_cost_micro == cost(SMALL, 9)
    # The hold is the prompt's bound alone: 41 bytes + 8 per input + 8 = 73 tokens,
    # ceil(73 x 0.02) = 2, x 1.2 margin -> 3; no output tokens.
    [reservation] = Reservation.objects.filter(wallet__account_id=tenant.account_id)
    assert (reservation.amount_micro, reservation.committed_micro) == (3, cost(SMALL, 9))
    assert reservation.status == "committed"
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert wallet.balance_micro == 100_000_000 - cost(SMALL, 9)


def test_token_arrays_a_string_and_the_caller_label(api):
    tenant = api.tenant()
    client = api.openai(tenant)

    arrays = client.embeddings.create(
        model=SMALL, input=[[1, 2, 3], [7, 7]], encoding_format="float", user="end-user-9"
    )
    one = client.embeddings.create(model=LARGE, input="hello there", encoding_format="float")

    assert arrays.usage.prompt_tokens == 5  # 3 + 2 token ids
    assert arrays.data[1].embedding == embedding_vector(SMALL, [7, 7], 8)
    assert one.usage.prompt_tokens == 2
    assert one.data[0].embedding == embedding_vector(LARGE, "hello there", 8)
    first, second = api.stub.vendor_calls()
    assert first["body"]["user"] not in (None, "end-user-9")  # the caller label, not the raw id
    assert "user" not in second["body"]
    rows = settled(tenant, 2)
    assert [(r.model_served, r.tokens_in, r.provider_cost_micro) for r in rows] == [
        (SMALL, 5, cost(SMALL, 5)),
        (LARGE, 2, cost(LARGE, 2)),
    ]
    assert rows[0].caller_label == first["body"]["user"]


def test_base64_bytes_are_little_endian_float32(api):
    tenant = api.tenant()

    response = httpx.post(
        f"{api.url}/v1/embeddings",
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={"model": SMALL, "input": "one two", "encoding_format": "base64", "dimensions": 4},
    )

    raw = base64.b64decode(response.json()["data"][0]["embedding"])
    assert list(struct.unpack("<4f", raw)) == embedding_vector(SMALL, "one two", 4)
    [row] = settled(tenant, 1)
    # Bytes metered both ways, as on chat: the body read and the answer written.
    assert row.bytes_out == len(response.content)
    assert row.bytes_in == len(response.request.content)


def test_kinds_do_not_cross_and_the_model_list_says_which_is_which(api):
    tenant = api.tenant()
    client = api.openai(tenant)

    with pytest.raises(openai.BadRequestError) as chat_model:
        client.embeddings.create(model="gpt-4o-mini", input="hi")
    with pytest.raises(openai.BadRequestError) as embedding_model:
        client.chat.completions.create(model=SMALL, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model=SMALL, input=[])
    listed = {m.id: m.model_extra["kind"] for m in client.models.list()}

    assert chat_model.value.body["code"] == "LM-2001"
    assert chat_model.value.body["message"] == "Model 'gpt-4o-mini' is not an embedding model."
    assert embedding_model.value.body["message"] == (
        f"Model '{SMALL}' is an embedding model: ask POST /v1/embeddings."
    )
    assert empty.value.body["message"] == (
        "'input' must be a string, a list of strings, a token array or a list of them."
    )
    assert (listed[SMALL], listed["compat-embed"], listed["gpt-4o-mini"]) == (
        "embedding",
        "embedding",
        "chat",
    )
    assert api.stub.vendor_calls() == []


def test_a_fallback_model_serves_when_the_first_fails(api):
    tenant = api.tenant()
    api.stub.faults({"kind": "500", "times": 2, "match": {"model": SMALL}})

    answer = api.openai(tenant).embeddings.create(
        model=f"{SMALL},compat-embed", input="a b c", encoding_format="float"
    )

    assert answer.model == "compat-embed"
    assert answer.data[0].embedding == embedding_vector("local-embed", "a b c", 8)
    calls = api.stub.vendor_calls()
    assert [(c["path"], c["model"]) for c in calls] == [
        ("/v1/embeddings", SMALL),
        ("/v1/embeddings", SMALL),
        ("/compat/v1/embeddings", "local-embed"),
    ]
    [row] = settled(tenant, 1)
    assert [(a.model, a.outcome) for a in row.attempts] == [
        (SMALL, "upstream_error"),
        (SMALL, "upstream_error"),
        ("compat-embed", "ok"),
    ]
    assert row.provider_cost_micro == TokenPrices.configured(
        input_micro_per_mtok=10_000, output_micro_per_mtok=0
    ).cost_micro(tokens_in=3, tokens_out=0)


def test_team_keys_serve_embeddings_unbilled_and_lock_the_chain(api):
    tenant = api.tenant()
    team_keys(api, tenant, "stub-openai", ["sk-team-embed"])  # fallback off

    answer = api.openai(tenant).embeddings.create(model=SMALL, input="x y", encoding_format="float")
    api.stub.faults({"kind": "429", "retry_after": 60, "match": {"key": "sk-team-embed"}})
    with pytest.raises(openai.RateLimitError) as refused:
        api.openai(tenant).embeddings.create(model=f"{SMALL},compat-embed", input="x y")

    assert answer.usage.prompt_tokens == 2
    assert refused.value.body["code"] == "LM-3021"
    assert [c["key"] for c in api.stub.vendor_calls()] == ["sk-team-embed", "sk-team-embed"]
    rows = settled(tenant, 2)
    assert [(r.served_by, r.byok_tokens_in, r.provider_cost_micro) for r in rows] == [
        ("team", 2, 0),
        ("", 0, 0),
    ]
    assert PLATFORM_KEY not in [c["key"] for c in api.stub.vendor_calls()]


def test_a_wallet_that_cannot_cover_the_hold_is_refused_before_the_vendor(api):
    tenant = api.tenant(wallet_micro=0)

    with pytest.raises(openai.APIStatusError) as refused:
        api.openai(tenant).embeddings.create(model=SMALL, input="hello")

    assert (refused.value.status_code, refused.value.body["code"]) == (402, "LM-4002")
    assert api.stub.vendor_calls() == []


def test_an_idempotency_key_replays_the_answer_without_a_second_call(api):
    tenant = api.tenant()
    client = api.openai(tenant)
    headers = {"Idempotency-Key": "embed-once-1"}

    first = client.embeddings.create(
        model=SMALL, input="same text", encoding_format="float", extra_headers=headers
    )
    again = client.embeddings.create(
        model=SMALL, input="same text", encoding_format="float", extra_headers=headers
    )

    assert again.data[0].embedding == first.data[0].embedding
    assert len(api.stub.vendor_calls()) == 1
    [row] = settled(tenant, 1)
    assert row.provider_cost_micro == cost(SMALL, 2)


def test_embeddings_and_responses_count_in_the_usage_event_of_their_window(api):
    from datetime import timedelta

    from django.db.models import F

    from usage.models import UsageEvent, UsageLog
    from usage.services import usage_events_flush

    tenant = api.tenant()
    client = api.openai(tenant)
    client.embeddings.create(model=SMALL, input=TEXTS, encoding_format="float")
    client.responses.create(model="gpt-4o-mini", input="one two three")
    rows = settled(tenant, 2)
    # As if stored an hour ago: their window is closed and past its grace.
    hour = timedelta(hours=1)
    UsageLog.objects.filter(group_id=tenant.group_id).update(
        stored_at=F("stored_at") - hour, created_at=F("created_at") - hour
    )

    usage_events_flush()

    [event] = UsageEvent.objects.filter(group_id=tenant.group_id)
    assert [r.endpoint for r in rows] == ["embeddings", "responses"]
    assert event.payload["requests"] == 2
    units = event.payload["units"]
    assert (units["tokens_in"], units["tokens_out"]) == (9 + 3, 8)
    assert units["provider_cost_micro_usd"] == sum(r.provider_cost_micro for r in rows)
    assert (units["bytes_in"], units["bytes_out"]) == (
        sum(r.bytes_in for r in rows),
        sum(r.bytes_out for r in rows),
    )
