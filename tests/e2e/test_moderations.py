"""`POST /v1/moderations` through the official SDK: the same keys, limits and money as
embeddings.

The stub's verdicts are deterministic (stubvendor/moderations.py): `violent` and `hateful`
flag, `rude` scores harassment 0.3 without flagging; its prompt tokens are the words of the
inputs (a real OpenAI answer reports no usage: its moderation is free).
"""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from billing.models import Reservation, Wallet
from core.money import TokenPrices
from stubvendor.moderations import moderation_result
from tests.support.profiles import MODERATION_MODEL, MODERATION_PRICE, api_profiles
from tests.support.stacks import own_stack
from tests.support.usage import settled

TEXTS = ["a violent storm", "rude remark here", "calm"]  # 3 + 3 + 1 = 7 tokens


@pytest.fixture
def api(transactional_db, shared_gateway, stub):
    return own_stack(shared_gateway, stub, api_profiles(stub.url))


def cost(tokens: int, price: int = MODERATION_PRICE) -> int:
    return TokenPrices.configured(input_micro_per_mtok=price, output_micro_per_mtok=0).cost_micro(
        tokens_in=tokens, tokens_out=0
    )


def test_sdk_moderations_are_the_vendors_verdicts_and_billed_per_input_token(api):
    tenant = api.tenant()
    client = api.openai(tenant)

    raw = client.moderations.with_raw_response.create(model=MODERATION_MODEL, input=TEXTS)
    answer = raw.parse()

    body = raw.http_response.json()
    assert re.fullmatch(r"modr-stub-\d+", body["id"])
    assert body == {
        "id": body["id"],
        "model": MODERATION_MODEL,
        "results": [moderation_result(text) for text in TEXTS],
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    assert [r.flagged for r in answer.results] == [True, False, False]
    assert answer.results[0].category_scores.violence == 0.91
    assert answer.results[1].category_scores.harassment == 0.3
    # Never cached: every answer says so.
    assert raw.headers["x-tollgate-cache"] == "bypass"
    [call] = api.stub.vendor_calls()
    assert (call["path"], call["body"]) == (
        "/v1/moderations",
        {"model": MODERATION_MODEL, "input": TEXTS},
    )
    [row] = settled(tenant, 1)
    assert (row.endpoint, row.model_served, row.served_by, row.tokens_in, row.tokens_out) == (
        "moderations",
        MODERATION_MODEL,
        "platform",
        7,
        0,
    )
    assert row.provider_cost_micro == cost(7) == 7  # $1 per million tokens
    # The hold is the prompt's bound alone: 35 bytes + 8 per input + 8 = 67 tokens = 67
    # micro-USD, x 1.2 margin -> 81; no output tokens.
    [reservation] = Reservation.objects.filter(wallet__account_id=tenant.account_id)
    assert (reservation.amount_micro, reservation.committed_micro) == (81, 7)
    assert reservation.status == "committed"
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert wallet.balance_micro == 100_000_000 - 7


def test_text_items_and_the_end_user_who_is_never_sent(api):
    tenant = api.tenant()
    client = api.openai(tenant)
    items = [{"type": "text", "text": "hateful words"}, {"type": "text", "text": "rude"}]

    raw = client.moderations.with_raw_response.create(
        model="compat-moderation", input=items, extra_body={"user": "end-user-9"}
    )

    assert raw.parse().model == "compat-moderation"
    assert raw.http_response.json()["results"] == [moderation_result("hateful words rude")]
    [call] = api.stub.vendor_calls()
    assert (call["path"], call["body"]) == (
        "/compat/v1/moderations",
        {"model": "local-moderation", "input": items},
    )
    [row] = settled(tenant, 1)
    assert (row.model_served, row.tokens_in, row.provider_cost_micro) == (
        "compat-moderation",
        3,
        cost(3, 20_000),
    )
    assert row.caller_label  # the label is the books', the raw id went nowhere


def test_kinds_do_not_cross_and_the_model_list_says_which_is_which(api):
    tenant = api.tenant()
    client = api.openai(tenant)

    with pytest.raises(openai.BadRequestError) as chat_model:
        client.moderations.create(model="gpt-4o-mini", input="hi")
    with pytest.raises(openai.BadRequestError) as embedding_model:
        client.moderations.create(model="text-embedding-3-small", input="hi")
    with pytest.raises(openai.BadRequestError) as moderation_model:
        client.chat.completions.create(
            model=MODERATION_MODEL, messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.BadRequestError) as on_embeddings:
        client.embeddings.create(model=MODERATION_MODEL, input="hi")
    with pytest.raises(openai.BadRequestError) as image:
        client.moderations.create(
            model=MODERATION_MODEL,
            input=[{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
        )
    listed = {m.id: m.model_extra["kind"] for m in client.models.list()}

    assert [e.value.body["code"] for e in (chat_model, moderation_model, image)] == ["LM-2001"] * 3
    assert chat_model.value.body["message"] == "Model 'gpt-4o-mini' is not a moderation model."
    assert embedding_model.value.body["message"] == (
        "Model 'text-embedding-3-small' is not a moderation model."
    )
    assert moderation_model.value.body["message"] == (
        f"Model '{MODERATION_MODEL}' is a moderation model: ask POST /v1/moderations."
    )
    assert on_embeddings.value.body["message"] == (
        f"Model '{MODERATION_MODEL}' is not an embedding model."
    )
    assert image.value.body["message"] == (
        "input[0] is an image: Tollgate's moderations take text items only."
    )
    assert (listed[MODERATION_MODEL], listed["compat-moderation"], listed["gpt-4o-mini"]) == (
        "moderation",
        "moderation",
        "chat",
    )
    assert api.stub.vendor_calls() == []


def test_a_vendor_500_is_our_upstream_error_and_costs_nothing(api):
    tenant = api.tenant()
    api.stub.faults({"kind": "500", "times": 2, "match": {"model": MODERATION_MODEL}})

    with pytest.raises(openai.InternalServerError) as failed:
        api.openai(tenant).moderations.create(model=MODERATION_MODEL, input="calm")

    assert (failed.value.status_code, failed.value.body["code"]) == (502, "LM-5001")
    assert failed.value.body["message"] == "The upstream provider failed (HTTP 500)."
    assert [c["path"] for c in api.stub.vendor_calls()] == ["/v1/moderations"] * 2  # two tries
    [row] = settled(tenant, 1)
    assert (row.endpoint, row.status, row.error_code, row.provider_cost_micro) == (
        "moderations",
        502,
        "LM-5001",
        0,
    )
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert wallet.balance_micro == 100_000_000


def test_bytes_are_metered_both_ways(api):
    tenant = api.tenant()

    response = httpx.post(
        f"{api.url}/v1/moderations",
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        json={"model": MODERATION_MODEL, "input": "one two"},
    )

    assert response.status_code == 200
    [row] = settled(tenant, 1)
    assert (row.bytes_in, row.bytes_out) == (len(response.request.content), len(response.content))
