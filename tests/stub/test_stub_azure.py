"""The stub's Azure OpenAI routes (stubvendor/azure.py): deployment paths with their
api-version, the v1 paths, the api-key header, Azure's errors and content filter; served
by the OpenAI handlers (answers, tokens, streaming, faults), driven by the official
AzureOpenAI client where it applies."""

from __future__ import annotations

import httpx
import openai
import pytest

from stubvendor.azure import ACCESS_DENIED, FILTERED_PROMPT
from stubvendor.server import StubServer

from ._support import oa_usage, sse_data, user

VERSION = "2024-10-21"
DEPLOYMENT = "prod-mini"
KEY = "azure-stub-key-1"
CHAT = f"/openai/deployments/{DEPLOYMENT}/chat/completions?api-version={VERSION}"
EMBED = f"/openai/deployments/{DEPLOYMENT}/embeddings?api-version={VERSION}"
AZ_AUTH = {"api-key": KEY}
ANSWER = f"Hello from the stub model {DEPLOYMENT} reply ok"
NOT_FOUND = {"error": {"code": "404", "message": "Resource not found"}}


@pytest.fixture()
def azure(stub: StubServer, client: httpx.Client) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=stub.url, api_key=KEY, api_version=VERSION, max_retries=0
    )


def calls(client: httpx.Client) -> list[dict]:
    return client.get("/_stub/calls").json()["calls"]


def test_a_deployment_path_answers_as_openai_with_the_deployment_as_model(azure, client):
    completion = azure.chat.completions.create(model=DEPLOYMENT, messages=user("two words"))

    assert completion.choices[0].message.content == ANSWER
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.model_dump(exclude_none=True) == oa_usage(2, 8)
    data = completion.model_dump()
    assert data["prompt_filter_results"][0]["prompt_index"] == 0
    assert data["choices"][0]["content_filter_results"]["violence"] == {
        "filtered": False,
        "severity": "safe",
    }
    [call] = calls(client)
    assert (call["path"], call["api_version"], call["model"], call["key"], call["status"]) == (
        f"/openai/deployments/{DEPLOYMENT}/chat/completions",
        VERSION,
        DEPLOYMENT,
        KEY,
        200,
    )


def test_the_path_names_the_model_whatever_the_body_says(client):
    body = {"model": "something-else", "messages": user("hi")}
    data = client.post(CHAT, json=body, headers=AZ_AUTH).json()
    assert data["model"] == DEPLOYMENT
    assert calls(client)[0]["model"] == DEPLOYMENT
    without_model = client.post(CHAT, json={"messages": user("hi")}, headers=AZ_AUTH)
    assert without_model.status_code == 200


def test_a_stream_starts_with_azures_prompt_filter_chunk_and_ends_as_openais(azure, client):
    stream = azure.chat.completions.create(
        model=DEPLOYMENT,
        messages=user("two words"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices == []
    assert chunks[0].model_dump()["prompt_filter_results"][0]["prompt_index"] == 0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.model_dump(exclude_none=True) == oa_usage(2, 8)
    assert calls(client)[0]["stream"] is True


def test_a_deployment_path_without_api_version_is_not_found_and_not_recorded(client):
    for path in (
        f"/openai/deployments/{DEPLOYMENT}/chat/completions",
        f"/openai/deployments/{DEPLOYMENT}/embeddings",
        "/openai/responses",
        f"/openai/deployments/{DEPLOYMENT}/completions?api-version={VERSION}",
    ):
        response = client.post(path, json={"messages": user("hi")}, headers=AZ_AUTH)
        assert (response.status_code, response.json()) == (404, NOT_FOUND), path
    assert calls(client) == []


@pytest.mark.parametrize(
    "headers",
    [{}, {"api-key": ""}, {"Authorization": f"Bearer {KEY}"}],
    ids=["none", "empty", "bearer"],
)
def test_a_call_without_an_api_key_is_refused_in_azures_shape(client, headers):
    response = client.post(CHAT, json={"messages": user("hi")}, headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": {"code": "401", "message": ACCESS_DENIED}}
    [call] = calls(client)
    assert (call["status"], call["key"]) == (401, None)


def test_a_key_outside_the_accepted_ones_is_refused_in_azures_shape():
    with StubServer(accept_keys=["good-key"]) as own, httpx.Client(base_url=own.url) as c:
        bad = c.post(CHAT, json={"messages": user("hi")}, headers={"api-key": "bad-key"})
        good = c.post(CHAT, json={"messages": user("hi")}, headers={"api-key": "good-key"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (401, "401")
    assert good.status_code == 200


def test_embeddings_on_a_deployment_path(azure, client):
    result = azure.embeddings.create(model=DEPLOYMENT, input=["one two", "three"])
    assert [d.index for d in result.data] == [0, 1]
    assert result.model == DEPLOYMENT
    assert calls(client)[0]["path"] == f"/openai/deployments/{DEPLOYMENT}/embeddings"


def test_responses_on_the_api_version_path_take_the_deployment_from_the_body(azure, client):
    response = azure.responses.create(model=DEPLOYMENT, input="two words")
    assert response.output_text == ANSWER
    [call] = calls(client)
    assert (call["path"], call["model"], call["key"]) == ("/openai/responses", DEPLOYMENT, KEY)


@pytest.mark.parametrize("api", ["chat/completions", "responses", "embeddings"])
def test_the_v1_paths_take_the_deployment_from_the_body(client, api):
    body = {
        "chat/completions": {"model": DEPLOYMENT, "messages": user("hi")},
        "responses": {"model": DEPLOYMENT, "input": "hi"},
        "embeddings": {"model": DEPLOYMENT, "input": "hi"},
    }[api]
    response = client.post(f"/res-a/openai/v1/{api}", json=body, headers=AZ_AUTH)
    assert response.status_code == 200
    [call] = calls(client)
    assert (call["path"], call["model"], call["key"], call["api_version"]) == (
        f"/res-a/openai/v1/{api}",
        DEPLOYMENT,
        KEY,
        None,
    )
    refused = client.post(f"/res-a/openai/v1/{api}", json=body, headers={"api-key": ""})
    assert refused.json() == {"error": {"code": "401", "message": ACCESS_DENIED}}


def test_a_v1_path_signed_as_openai_is_openais_route(stub, client):
    sdk = openai.OpenAI(base_url=stub.url + "/openai/v1", api_key="sk-oa", max_retries=0)
    completion = sdk.chat.completions.create(model="m1", messages=user("hi"))
    assert completion.model_dump().get("prompt_filter_results") is None
    assert calls(client)[0]["key"] == "sk-oa"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_prompt_with_filterme_is_refused_by_the_content_filter(azure, client, stream):
    with pytest.raises(openai.BadRequestError) as refused:
        azure.chat.completions.create(
            model=DEPLOYMENT, messages=user("please FILTERME now"), stream=stream
        )
    error = refused.value.body
    assert (error["code"], error["message"], error["param"]) == (
        "content_filter",
        FILTERED_PROMPT,
        "prompt",
    )
    assert error["innererror"]["code"] == "ResponsibleAIPolicyViolation"
    assert error["innererror"]["content_filter_result"]["violence"]["filtered"] is True
    [call] = calls(client)
    assert (call["status"], call["fault"]) == (400, None)


def test_the_content_filter_refuses_a_responses_prompt_but_not_an_embedding(azure, client):
    with pytest.raises(openai.BadRequestError):
        azure.responses.create(model=DEPLOYMENT, input="FILTERME")
    assert azure.embeddings.create(model=DEPLOYMENT, input="FILTERME").data


def test_the_refusal_comes_before_faults_and_leaves_them_queued(azure, client):
    client.post("/_stub/faults", json={"faults": [{"kind": "500"}]})
    with pytest.raises(openai.BadRequestError):
        azure.chat.completions.create(model=DEPLOYMENT, messages=user("FILTERME"))
    assert len(client.get("/_stub/faults").json()["faults"]) == 1


def test_an_answer_with_filteranswer_ends_with_content_filter(azure):
    completion = azure.chat.completions.create(model=DEPLOYMENT, messages=user("FILTERANSWER"))
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == (ANSWER, "content_filter")
    assert choice.model_dump()["content_filter_results"]["violence"]["filtered"] is True
    assert completion.usage.model_dump(exclude_none=True) == oa_usage(1, 8)


def test_a_streamed_answer_with_filteranswer_ends_with_content_filter(client):
    body = {"messages": user("FILTERANSWER"), "stream": True}
    events = sse_data(client.post(CHAT, json=body, headers=AZ_AUTH).text)
    finishes = [c["choices"][0]["finish_reason"] for c in events[:-1] if c["choices"]]
    assert finishes[-1] == "content_filter"
    assert events[-1] == "[DONE]"


def test_faults_apply_to_the_azure_routes_and_count_only_answer_pieces(client):
    client.post(
        "/_stub/faults",
        json={"faults": [{"kind": "429", "retry_after": 3}, {"kind": "fail_after_tokens"}]},
    )
    limited = client.post(CHAT, json={"messages": user("hi")}, headers=AZ_AUTH)
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(CHAT, json={"messages": user("hi"), "stream": True}, headers=AZ_AUTH).read()
    assert [c["fault"] for c in calls(client)] == ["429", "fail_after_tokens"]


def test_a_get_on_an_azure_path_is_not_allowed(client):
    assert client.get(CHAT, headers=AZ_AUTH).status_code == 405
