"""The stub's Bedrock runtime: SigV4-signed Converse calls accepted, badly signed ones refused
with 403, answers by the stub's word and token rules, streams in AWS event-stream framing
that botocore's own parser reads."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

from stubvendor.bedrock_answers import exception_frame
from stubvendor.bedrock_signing import SIGNATURE_MISMATCH, TEST_CREDENTIALS
from tests.stub._support import ANSWER_M1, WORDS_M1

AKID, SECRET = TEST_CREDENTIALS.split(":")
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
HELLO = {"messages": [{"role": "user", "content": [{"text": "say hello to me"}]}]}
EVENT_STREAM = "application/vnd.amazon.eventstream"


def signed(
    url: str,
    body: dict[str, Any],
    *,
    stream: bool = False,
    model: str = MODEL,
    key: str = AKID,
    secret: str = SECRET,
    service: str = "bedrock",
    headers: dict[str, str] | None = None,
) -> tuple[str, bytes, dict[str, str]]:
    """Sign a Converse call as botocore signs one: (URL, body, headers)."""
    api = "converse-stream" if stream else "converse"
    target = f"{url}/model/{quote(model, safe='')}/{api}"
    content = orjson.dumps(body)
    request = AWSRequest(
        method="POST",
        url=target,
        data=content,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    SigV4Auth(Credentials(key, secret), service, "us-east-1").add_auth(request)
    return target, content, dict(request.headers.items())


def post(url: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
    # httpx keeps the path as given (the signed `%3A` stays).
    return httpx.post(url, content=content, headers=headers, timeout=10)


def events(raw: bytes) -> list[tuple[str, str, dict]]:
    """(message type, event or exception type, payload) of each frame, read by botocore."""
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    out = []
    for message in buffer:
        headers = message.headers
        kind = headers[":message-type"]
        name = headers[":event-type"] if kind == "event" else headers[":exception-type"]
        out.append((kind, name, orjson.loads(message.payload)))
    return out


def test_a_signed_converse_call_is_answered_with_the_stubs_words_and_counts(stub, client):
    response = post(*signed(stub.url, HELLO))

    assert response.status_code == 200, response.text
    assert response.json() == {
        "output": {
            "message": {"role": "assistant", "content": [{"text": ANSWER_M1.replace("m1", MODEL)}]}
        },
        "stopReason": "end_turn",
        "usage": {"inputTokens": 4, "outputTokens": 8, "totalTokens": 12},
        "metrics": {"latencyMs": 0},
    }
    [call] = client.get("/_stub/calls").json()["calls"]
    assert (call["model"], call["key"], call["region"], call["shape"], call["status"]) == (
        MODEL,
        AKID,
        "us-east-1",
        "bedrock",
        200,
    )


def test_a_tampered_body_is_refused_with_403(stub, client):
    url, content, headers = signed(stub.url, HELLO)

    response = post(url, content.replace(b"hello", b"HELLO"), headers)

    assert response.status_code == 403
    assert response.json() == {"message": SIGNATURE_MISMATCH}
    assert response.headers["x-amzn-ErrorType"] == "AccessDeniedException"
    [call] = client.get("/_stub/calls").json()["calls"]
    assert (call["key"], call["status"]) == (AKID, 403)


@pytest.mark.parametrize(
    ("signing", "message"),
    [
        ({"secret": "wrong-secret"}, SIGNATURE_MISMATCH),
        ({"key": "AKIAUNKNOWN000000000"}, "The security token included in the request is invalid."),
        ({"service": "s3"}, "Credential should be scoped to correct service: 'bedrock'."),
    ],
    ids=["wrong-secret", "unknown-key", "wrong-service"],
)
def test_a_wrong_credential_is_refused_with_403(stub, client, signing, message):
    response = post(*signed(stub.url, HELLO, **signing))

    assert (response.status_code, response.json()) == (403, {"message": message})


def test_a_tampered_path_or_a_missing_signature_is_refused(stub, client):
    url, content, headers = signed(stub.url, HELLO)

    moved = post(url.replace("haiku", "sonnet"), content, headers)
    unsigned = post(url, content, {"Content-Type": "application/json"})

    assert (moved.status_code, moved.json()) == (403, {"message": SIGNATURE_MISMATCH})
    assert (unsigned.status_code, unsigned.json()) == (
        403,
        {"message": "Missing Authentication Token"},
    )


def test_converse_stream_frames_are_read_by_botocores_parser(stub, client):
    body = {**HELLO, "inferenceConfig": {"maxTokens": 3}}

    response = post(*signed(stub.url, body, stream=True))

    assert response.status_code == 200
    assert response.headers["content-type"] == EVENT_STREAM
    words = [w.replace("m1", MODEL) for w in WORDS_M1[:3]]
    assert events(response.content) == [
        ("event", "messageStart", {"role": "assistant"}),
        *[
            ("event", "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w}})
            for w in words
        ],
        ("event", "contentBlockStop", {"contentBlockIndex": 0}),
        ("event", "messageStop", {"stopReason": "max_tokens"}),
        (
            "event",
            "metadata",
            {
                "usage": {"inputTokens": 4, "outputTokens": 3, "totalTokens": 7},
                "metrics": {"latencyMs": 0},
            },
        ),
    ]


def test_tools_are_called_and_streamed_as_tool_use_blocks(stub, client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    body = {
        **HELLO,
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "weather", "inputSchema": {"json": schema}}}],
            "toolChoice": {"tool": {"name": "weather"}},
        },
    }

    whole = post(*signed(stub.url, body)).json()
    streamed = events(post(*signed(stub.url, body, stream=True)).content)

    [block] = whole["output"]["message"]["content"]
    assert block["toolUse"]["name"] == "weather"
    assert block["toolUse"]["input"] == {"city": "stub"}
    assert (whole["stopReason"], whole["usage"]) == (
        "tool_use",
        {"inputTokens": 14, "outputTokens": 5, "totalTokens": 19},
    )
    start = streamed[1][2]["start"]["toolUse"]
    assert start["name"] == "weather" and start["toolUseId"].startswith("tooluse_stub_")
    fragments = [e[2]["delta"]["toolUse"]["input"] for e in streamed if e[1] == "contentBlockDelta"]
    assert "".join(fragments) == '{"city":"stub"}'
    assert streamed[-2] == ("event", "messageStop", {"stopReason": "tool_use"})


def test_a_cache_point_writes_then_reads_the_prefix(stub, client):
    system = [{"text": "you are a very careful helper"}, {"cachePoint": {"type": "default"}}]
    body = {**HELLO, "system": system}

    first = post(*signed(stub.url, body)).json()["usage"]
    second = post(*signed(stub.url, body)).json()["usage"]

    written = {"cacheReadInputTokens": 0, "cacheWriteInputTokens": 6}
    assert first == {"inputTokens": 4, "outputTokens": 8, "totalTokens": 18, **written}
    read = {"cacheReadInputTokens": 6, "cacheWriteInputTokens": 0}
    assert second == {"inputTokens": 4, "outputTokens": 8, "totalTokens": 18, **read}


def test_faults_answer_in_bedrocks_error_shape(stub, client):
    client.post("/_stub/faults", json={"faults": [{"kind": 429, "retry_after": 3}]})

    response = post(*signed(stub.url, HELLO))

    assert response.status_code == 429
    assert response.headers["x-amzn-ErrorType"] == "ThrottlingException"
    assert response.headers["Retry-After"] == "3"
    assert set(response.json()) == {"message"}


def test_a_stream_cut_after_tokens_ends_without_its_stop(stub, client):
    client.post("/_stub/faults", json={"faults": [{"kind": "fail_after_tokens"}]})
    url, content, headers = signed(stub.url, HELLO, stream=True)

    received = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", url, content=content, headers=headers, timeout=10) as response,
    ):
        for part in response.iter_raw():
            received += part

    names = [name for _, name, _ in events(received)]
    assert names == ["messageStart", "contentBlockDelta", "contentBlockDelta"]


def test_exception_frames_are_read_by_botocores_parser():
    assert events(exception_frame("throttlingException", "slow down")) == [
        ("exception", "throttlingException", {"message": "slow down"})
    ]
