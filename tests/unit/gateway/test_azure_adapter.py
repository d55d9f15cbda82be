"""The Azure OpenAI adapter builds each call: its URL (the deployment's path with an
api-version, or the v1 path), its headers (the key in `api-key`) and its body (the
deployment as `model`). In-process: no call is made."""

from __future__ import annotations

import orjson
import pytest

from gateway.adapters.azure import AzureOpenAIProvider, resource_url
from gateway.adapters.base import CallTarget, VendorOptions
from gateway.shapes import embeddings as embeddings_shape
from gateway.shapes import openai as openai_shape
from gateway.shapes import responses as responses_shape
from gateway.types import EMBEDDINGS, OPENAI, RESPONSES, ModelRequest

RESOURCE = "https://contoso.openai.azure.com"
KEY = "azure-key-0123456789abcdef"
VERSION = "2024-10-21"
CHAT = openai_shape.parse_request(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
)
STREAMED_CHAT = openai_shape.parse_request(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}
)
RESPONSES_REQ = responses_shape.parse_request({"model": "gpt-4o-mini", "input": "hi"})
EMBEDDINGS_REQ = embeddings_shape.parse_request({"model": "embed-small", "input": "hi"})
REQUESTS = {OPENAI: CHAT, RESPONSES: RESPONSES_REQ, EMBEDDINGS: EMBEDDINGS_REQ}


def adapter(api_version: str = VERSION, base_url: str = RESOURCE) -> AzureOpenAIProvider:
    return AzureOpenAIProvider(
        base_url=base_url,
        client=None,  # type: ignore[arg-type]  # building a call never touches it
        options=VendorOptions(api_version=api_version),
    )


def call_target(req: ModelRequest, *, deployment: str = "prod-4o-mini") -> CallTarget:
    return CallTarget(
        upstream_model=deployment,
        api_key=KEY,
        max_tokens=64,
        payload=req.body,
        shape=req.shape,
        caller_label="caller-7",
    )


def call(
    provider: AzureOpenAIProvider, req: ModelRequest, *, deployment: str = "prod-4o-mini"
) -> tuple[str, dict, dict[str, str]]:
    url, body, headers = provider.request(req, call_target(req, deployment=deployment))
    return url, orjson.loads(body), headers


@pytest.mark.parametrize(
    ("shape", "url"),
    [
        (
            OPENAI,
            f"{RESOURCE}/openai/deployments/prod-4o-mini/chat/completions?api-version={VERSION}",
        ),
        (
            EMBEDDINGS,
            f"{RESOURCE}/openai/deployments/prod-4o-mini/embeddings?api-version={VERSION}",
        ),
        (RESPONSES, f"{RESOURCE}/openai/responses?api-version={VERSION}"),
    ],
)
def test_with_an_api_version_a_call_goes_to_its_deployment_path(shape, url):
    sent_url, body, _ = call(adapter(), REQUESTS[shape])
    assert sent_url == url
    assert body["model"] == "prod-4o-mini"  # ignored on a deployment path; Responses needs it


@pytest.mark.parametrize(
    ("shape", "path"),
    [(OPENAI, "/chat/completions"), (EMBEDDINGS, "/embeddings"), (RESPONSES, "/responses")],
)
def test_without_an_api_version_a_call_goes_to_the_v1_path_with_the_deployment_as_model(
    shape, path
):
    sent_url, body, _ = call(adapter(api_version=""), REQUESTS[shape])
    assert sent_url == f"{RESOURCE}/openai/v1{path}"
    assert body["model"] == "prod-4o-mini"


def test_each_model_goes_to_its_own_deployment():
    provider = adapter()
    urls = [call(provider, CHAT, deployment=name)[0] for name in ("east-4o", "west-o4")]
    assert urls == [
        f"{RESOURCE}/openai/deployments/east-4o/chat/completions?api-version={VERSION}",
        f"{RESOURCE}/openai/deployments/west-o4/chat/completions?api-version={VERSION}",
    ]


def test_a_deployment_name_is_quoted_into_its_path():
    url, _, _ = call(adapter(), CHAT, deployment="my deploy/1")
    assert url.startswith(f"{RESOURCE}/openai/deployments/my%20deploy%2F1/chat/completions?")


@pytest.mark.parametrize(
    "base_url",
    [RESOURCE, RESOURCE + "/", RESOURCE + "/openai", RESOURCE + "/openai/v1/"],
)
def test_the_base_url_may_name_the_resource_or_its_openai_path(base_url):
    assert resource_url(base_url) == RESOURCE
    assert call(adapter("", base_url), CHAT)[0] == f"{RESOURCE}/openai/v1/chat/completions"
    assert call(adapter(VERSION, base_url), RESPONSES_REQ)[0] == (
        f"{RESOURCE}/openai/responses?api-version={VERSION}"
    )


@pytest.mark.parametrize("api_version", [VERSION, ""])
def test_the_key_goes_in_the_api_key_header_and_never_in_authorization(api_version):
    for req in REQUESTS.values():
        _, _, headers = call(adapter(api_version), req)
        assert headers == {"api-key": KEY, "Content-Type": "application/json"}


@pytest.mark.parametrize("api_version", [VERSION, "2025-04-01-preview", ""])
def test_chat_caps_the_output_with_max_completion_tokens_where_azure_takes_it(api_version):
    _, body, _ = call(adapter(api_version), CHAT)
    assert body["max_completion_tokens"] == 64
    assert "max_tokens" not in body
    assert body["user"] == "caller-7"


def test_before_2024_09_01_chat_caps_the_output_with_max_tokens():
    _, body, _ = call(adapter("2024-06-01"), CHAT)
    assert body["max_tokens"] == 64
    assert "max_completion_tokens" not in body


def test_a_stream_asks_for_its_usage_as_openai_does():
    _, body, _ = call(adapter(), STREAMED_CHAT)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_responses_and_embeddings_bodies_are_openais():
    _, responses_body, _ = call(adapter(), RESPONSES_REQ)
    assert responses_body["input"] == "hi"
    assert responses_body["max_output_tokens"] == 64
    _, embeddings_body, _ = call(adapter(), EMBEDDINGS_REQ)
    assert embeddings_body == {"model": "prod-4o-mini", "input": "hi", "user": "caller-7"}


def test_it_serves_chat_responses_and_embeddings_natively():
    assert adapter().native == frozenset({OPENAI, RESPONSES, EMBEDDINGS})
    assert adapter().shape == OPENAI


def test_a_stream_drops_azures_filter_annotations_chunk_and_keeps_openais():
    decoder = adapter().decoder(call_target(CHAT))
    annotations = {"choices": [], "id": "", "object": "", "prompt_filter_results": [{}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 8}}
    text = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
    assert decoder.feed("", orjson.dumps(annotations)) is None
    assert decoder.feed("", orjson.dumps(text)).text == "Hi"
    assert decoder.feed("", orjson.dumps(usage)).usage.output_tokens == 8
    assert decoder.feed("", b"[DONE]") is None
    assert decoder.done
