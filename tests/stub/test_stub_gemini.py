"""The stub's Google routes: the Gemini API (key header or query), Vertex AI (a bearer token
its own token endpoint issued), the JWT-bearer token endpoint (signature checked against a
registered key), deterministic answers and tokens, the blocked prompt, and faults."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest
from google.oauth2 import service_account

from gateway.adapters.vertex import SCOPES, UrllibTransport
from stubvendor.server import StubServer
from tests.support.google import service_account_key

GM = "/v1beta/models/gemini-2.5-flash:generateContent"
GM_STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
VX = "/v1/projects/acme/locations/us-central1/publishers/google/models/gemini-2.5-flash"
GM_AUTH = {"x-goog-api-key": "gm-key-1"}
WORDS = "Hello from the stub model gemini-2.5-flash reply ok"


def contents(text: str) -> list[dict]:
    return [{"role": "user", "parts": [{"text": text}]}]


def events(response: httpx.Response) -> list[dict]:
    return [
        orjson.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


def access_token(stub_url: str, info: dict) -> str:
    credentials = service_account.Credentials.from_service_account_info(info, scopes=list(SCOPES))
    credentials.refresh(UrllibTransport())
    return credentials.token


# ---------------------------------------------------------------- the Gemini API


def test_an_answer_counts_words_tools_and_thinking(client):
    body = {
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": contents("how are you"),
        "generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}, "candidateCount": 2},
    }

    answer = client.post(GM, json=body, headers=GM_AUTH).json()

    assert [c["content"]["parts"] for c in answer["candidates"]] == [[{"text": WORDS}]] * 2
    assert [c["finishReason"] for c in answer["candidates"]] == ["STOP", "STOP"]
    assert answer["usageMetadata"] == {
        "promptTokenCount": 5,
        "candidatesTokenCount": 16,
        "thoughtsTokenCount": 32,
        "totalTokenCount": 53,
    }
    [call] = client.get("/_stub/calls").json()["calls"]
    assert (call["shape"], call["model"], call["key"], call["stream"]) == (
        "gemini",
        "gemini-2.5-flash",
        "gm-key-1",
        False,
    )


def test_a_stream_sends_one_event_per_word_then_the_finish_and_usage(client):
    body = {"contents": contents("hi"), "generationConfig": {"maxOutputTokens": 3}}

    streamed = events(client.post(GM_STREAM, json=body, headers=GM_AUTH))

    assert [e["candidates"][0]["content"]["parts"][0]["text"] for e in streamed] == [
        "Hello",
        " from",
        " the",
        "",
    ]
    assert streamed[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert streamed[-1]["usageMetadata"] == {
        "promptTokenCount": 1,
        "candidatesTokenCount": 3,
        "totalTokenCount": 4,
    }


def test_declared_functions_are_called_unless_the_mode_is_none(client):
    declaration = {
        "name": "get_weather",
        "parametersJsonSchema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    body = {"contents": contents("weather"), "tools": [{"functionDeclarations": [declaration]}]}

    called = client.post(GM, json=body, headers=GM_AUTH).json()
    not_called = client.post(
        GM,
        json={**body, "toolConfig": {"functionCallingConfig": {"mode": "NONE"}}},
        headers=GM_AUTH,
    ).json()

    assert called["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "get_weather", "args": {"city": "stub"}}}
    ]
    assert called["usageMetadata"]["promptTokenCount"] == 11  # one word + 10 per declaration
    assert called["usageMetadata"]["candidatesTokenCount"] == 5
    assert not_called["candidates"][0]["content"]["parts"] == [{"text": WORDS}]


def test_json_output_follows_the_response_schema(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    config = {"responseMimeType": "application/json", "responseJsonSchema": schema}

    answer = client.post(
        GM, json={"contents": contents("count"), "generationConfig": config}, headers=GM_AUTH
    ).json()

    assert answer["candidates"][0]["content"]["parts"] == [{"text": '{"n":1}'}]
    assert answer["usageMetadata"]["candidatesTokenCount"] == 1


def test_a_repeated_long_prefix_is_reported_cached(client):
    long_turn = {"role": "user", "parts": [{"text": "word " * 70}]}
    first = [long_turn, {"role": "model", "parts": [{"text": "ok"}]}, *contents("one")]
    second = [*first[:2], *contents("two more")]

    client.post(GM, json={"contents": first}, headers=GM_AUTH)
    answer = client.post(GM, json={"contents": second}, headers=GM_AUTH).json()

    assert answer["usageMetadata"]["promptTokenCount"] == 73
    assert answer["usageMetadata"]["cachedContentTokenCount"] == 71


def test_blockme_is_a_blocked_prompt_whole_and_streamed(client):
    body = {"contents": contents("please BLOCKME now")}

    whole = client.post(GM, json=body, headers=GM_AUTH)
    streamed = events(client.post(GM_STREAM, json=body, headers=GM_AUTH))

    assert whole.status_code == 200
    assert whole.json()["promptFeedback"] == {"blockReason": "PROHIBITED_CONTENT"}
    assert "candidates" not in whole.json()
    assert streamed == [whole.json() | {"responseId": streamed[0]["responseId"]}]


def test_the_key_may_be_a_query_and_a_missing_one_is_googles_403(client):
    assert client.post(GM + "?key=q-key", json={"contents": contents("hi")}).status_code == 200
    missing = client.post(GM, json={"contents": contents("hi")})

    assert missing.status_code == 403
    assert missing.json()["error"]["status"] == "PERMISSION_DENIED"
    assert [c["key"] for c in client.get("/_stub/calls").json()["calls"]] == ["q-key", None]


def test_a_key_not_accepted_is_googles_invalid_argument():
    with StubServer(accept_keys=["good"]) as stub:
        refused = httpx.post(stub.url + GM, json={}, headers={"x-goog-api-key": "bad"})

    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "API key not valid. Please pass a valid API key."
    assert refused.json()["error"]["details"][0]["reason"] == "API_KEY_INVALID"


def test_faults_answer_in_googles_error_shape_and_cut_streams(client):
    client.post("/_stub/faults", json={"faults": [{"kind": "429", "retry_after": 3}]})
    limited = client.post(GM, json={"contents": contents("hi")}, headers=GM_AUTH)
    client.post(
        "/_stub/faults", json={"faults": [{"kind": "fail_after_tokens", "after_tokens": 2}]}
    )
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(GM_STREAM, json={"contents": contents("hi")}, headers=GM_AUTH)

    assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
    assert limited.json() == {
        "error": {
            "code": 429,
            "message": "Rate limit reached (stub fault).",
            "status": "RESOURCE_EXHAUSTED",
        }
    }


# ---------------------------------------------------------------- tokens and Vertex AI


def test_a_service_account_gets_a_token_and_vertex_takes_only_tokens_it_issued(stub, client):
    info = service_account_key(stub.url)

    token = access_token(stub.url, info)
    answer = client.post(
        f"{VX}:generateContent",
        json={"contents": contents("hi")},
        headers={"Authorization": f"Bearer {token}"},
    )
    refused = client.post(
        f"{VX}:generateContent", json={}, headers={"Authorization": "Bearer ya29.made-up"}
    )

    assert token.startswith("ya29.stub-")
    assert answer.status_code == 200
    assert answer.json()["candidates"][0]["content"]["parts"] == [{"text": WORDS}]
    assert refused.status_code == 401
    assert refused.json()["error"]["status"] == "UNAUTHENTICATED"
    grant, served, _ = client.get("/_stub/calls").json()["calls"]
    assert (grant["shape"], grant["key"], grant["model"]) == (
        "google-token",
        info["client_email"],
        None,
    )
    assert grant["body"]["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert (served["shape"], served["key"], served["principal"]) == (
        "vertex",
        token,
        info["client_email"],
    )
    assert (served["project"], served["location"]) == ("acme", "us-central1")


def test_an_assertion_signed_by_another_key_is_refused(stub, client):
    registered = service_account_key(stub.url)
    impostor = {
        **service_account_key(stub.url, register=False),
        "client_email": registered["client_email"],
    }

    with pytest.raises(Exception, match="Invalid JWT Signature"):
        access_token(stub.url, impostor)


def test_a_wrong_grant_type_is_refused(client):
    refused = client.post(
        "/_stub/google/token", data={"grant_type": "client_credentials", "assertion": "x"}
    )

    assert (refused.status_code, refused.json()["error"]) == (400, "unsupported_grant_type")


def test_an_expired_token_is_refused(stub, client):
    token = access_token(stub.url, service_account_key(stub.url, lifetime_s=1))
    time.sleep(1.05)

    expired = client.post(
        f"{VX}:streamGenerateContent?alt=sse",
        json={"contents": contents("hi")},
        headers={"Authorization": f"Bearer {token}"},
    )

    assert expired.status_code == 401
