"""The stub's refusal faults (400, 404, 413, 422): the vendor refusing the request itself, in
each vendor's error shape, with the fault's message exactly as given."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from ._support import AN, AN_AUTH, OA, OA_AUTH

OA_BODY = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
AN_BODY = {"model": "m1", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def queue(client: httpx.Client, *faults: dict) -> None:
    response = client.post("/_stub/faults", json={"faults": list(faults)})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("kind", "openai_error", "anthropic_type"),
    [
        ("400", openai.BadRequestError, "invalid_request_error"),
        ("404", openai.NotFoundError, "not_found_error"),
        ("413", openai.APIStatusError, "request_too_large"),
        ("422", openai.UnprocessableEntityError, "invalid_request_error"),
    ],
)
def test_a_refusal_fault_answers_its_status_and_message_in_each_vendors_shape(
    client, oa_sdk, an_sdk, kind, openai_error, anthropic_type
):
    queue(client, {"kind": kind, "message": f"refused as {kind}", "times": 2})

    with pytest.raises(openai_error) as oa_refused:
        oa_sdk.chat.completions.create(**OA_BODY)
    with pytest.raises(anthropic.APIStatusError) as an_refused:
        an_sdk.messages.create(**AN_BODY)

    assert oa_refused.value.status_code == int(kind)
    assert oa_refused.value.body == {
        "message": f"refused as {kind}",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large" if kind == "413" else ("not_found" if kind == "404" else None),
    }
    assert an_refused.value.status_code == int(kind)
    assert an_refused.value.body == {
        "type": "error",
        "error": {"type": anthropic_type, "message": f"refused as {kind}"},
    }
    calls = client.get("/_stub/calls").json()["calls"]
    assert [(c["fault"], c["status"]) for c in calls] == [(kind, int(kind))] * 2


def test_a_refusal_without_a_message_says_the_default_and_is_listed_with_it(client):
    queue(client, {"kind": 400, "match": {"model": "m1"}})

    assert client.get("/_stub/faults").json()["faults"] == [
        {
            "credits": 0,
            "kind": "400",
            "retry_after": 1,
            "after_tokens": 2,
            "delay_ms": 200,
            "times": 1,
            "match": {"model": "m1"},
            "message": "The request was refused (stub fault).",
        }
    ]
    response = client.post(OA, json=OA_BODY, headers=OA_AUTH)
    assert (response.status_code, response.json()["error"]["message"]) == (
        400,
        "The request was refused (stub fault).",
    )
    assert client.post(OA, json=OA_BODY, headers=OA_AUTH).status_code == 200  # used once


def test_the_message_goes_out_exactly_as_given_control_characters_included(client):
    nasty = "bad\x00 field\n\u202e" + "x" * 5000
    queue(client, {"kind": "422", "message": nasty})

    response = client.post(AN, json=AN_BODY, headers=AN_AUTH)

    assert (response.status_code, response.json()["error"]["message"]) == (422, nasty)


def test_the_older_kinds_are_listed_without_a_message(client):
    queue(client, {"kind": "500"}, {"kind": "429", "retry_after": 2})

    assert ["message" in f for f in client.get("/_stub/faults").json()["faults"]] == [False] * 2


@pytest.mark.parametrize("message", [5, "x" * 10_001, ["a"]])
def test_a_refusal_message_that_is_not_a_bounded_string_queues_nothing(client, message):
    response = client.post("/_stub/faults", json={"faults": [{"kind": "400", "message": message}]})

    assert response.status_code == 400
    assert client.get("/_stub/faults").json() == {"faults": []}


def test_the_web_vendors_refuse_in_their_own_shape(client):
    queue(client, {"kind": "404", "message": "no such index"})

    response = client.post(
        "/web/v1/search", json={"query": "tollgate"}, headers={"Authorization": "Bearer sk-s"}
    )

    assert (response.status_code, response.json()) == (
        404,
        {"error": {"message": "no such index", "type": "not_found_error"}},
    )
