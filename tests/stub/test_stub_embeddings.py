"""The stub's OpenAI embeddings route (stubvendor/embeddings.py), through the official SDK."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from stubvendor.embeddings import embedding_vector

from ._support import OA_AUTH

EMB = "/v1/embeddings"


def queue(client: httpx.Client, *faults: dict[str, Any]) -> None:
    assert client.post("/_stub/faults", json={"faults": list(faults)}).status_code == 200


def calls(client: httpx.Client) -> list[dict[str, Any]]:
    return client.get("/_stub/calls").json()["calls"]


def error(message: str, param: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": None,
        }
    }


BAD_INPUT = error(
    "input: a non-empty string, a list of non-empty strings, a token array "
    "or a list of token arrays is required.",
    "input",
)


# --------------------------------------------------------------------------- the vector rule


def test_vector_rule_is_shake256_of_the_compact_json_as_signed_16_bit_steps() -> None:
    digest = hashlib.shake_256(b'["emb","hello world"]').digest(6)
    expected = [(u - 32768) / 32768 for u in struct.unpack(">3H", digest)]
    assert embedding_vector("emb", "hello world", 3) == expected
    assert embedding_vector("emb", "hello world", 3) == [
        -0.49603271484375,
        -0.287017822265625,
        -0.3961181640625,
    ]
    canonical = json.dumps(["emb", [1, 2, 3]], separators=(",", ":")).encode()
    digest = hashlib.shake_256(canonical).digest(16)
    assert embedding_vector("emb", [1, 2, 3]) == [
        (u - 32768) / 32768 for u in struct.unpack(">8H", digest)
    ]


def test_vectors_are_exact_in_float32_and_shorter_ones_are_prefixes() -> None:
    vector = embedding_vector("emb", "héllo", 64)
    assert list(struct.unpack("<64f", struct.pack("<64f", *vector))) == vector
    assert embedding_vector("emb", "héllo", 5) == vector[:5]
    assert embedding_vector("emb", "héllo") == vector[:8]
    assert embedding_vector("other", "héllo") != vector[:8]


# --------------------------------------------------------------------------- answers


def test_float_answer_has_exact_vectors_ids_and_word_usage(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.embeddings.create(
        model="emb", input=["hello  world", "one", "  "], encoding_format="float"
    )
    assert r.object == "list" and r.model == "emb"
    assert [(d.object, d.index) for d in r.data] == [("embedding", i) for i in range(3)]
    assert [d.embedding for d in r.data] == [
        embedding_vector("emb", "hello  world"),
        embedding_vector("emb", "one"),
        embedding_vector("emb", "  "),
    ]
    assert r.usage.model_dump() == {"prompt_tokens": 4, "total_tokens": 4}  # 2 + 1 + 1


def test_sdk_default_asks_base64_and_decodes_the_same_vectors(
    oa_sdk: openai.OpenAI, client: httpx.Client
) -> None:
    r = oa_sdk.embeddings.create(model="emb", input="a b c", dimensions=16)
    assert [d.embedding for d in r.data] == [embedding_vector("emb", "a b c", 16)]
    assert r.usage.model_dump() == {"prompt_tokens": 3, "total_tokens": 3}
    assert calls(client)[0]["body"] == {
        "model": "emb",
        "input": "a b c",
        "dimensions": 16,
        "encoding_format": "base64",
    }


def test_explicit_base64_is_little_endian_float32(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.embeddings.create(model="emb", input="x", encoding_format="base64")
    raw = r.data[0].embedding
    assert isinstance(raw, str)  # asked for explicitly: the SDK leaves it encoded
    assert list(struct.unpack("<8f", base64.b64decode(raw))) == embedding_vector("emb", "x")


def test_dimensions_sets_the_length(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.embeddings.create(model="emb", input="x", dimensions=3, encoding_format="float")
    assert r.data[0].embedding == embedding_vector("emb", "x", 3)
    assert len(r.data[0].embedding) == 3


def test_token_arrays_count_their_length(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.embeddings.create(model="emb", input=[5, 6, 7], encoding_format="float")
    assert [d.embedding for d in r.data] == [embedding_vector("emb", [5, 6, 7])]
    assert r.usage.prompt_tokens == 3
    r = oa_sdk.embeddings.create(model="emb", input=[[1, 2], [3, 4, 5, 6]])
    assert [d.embedding for d in r.data] == [
        embedding_vector("emb", [1, 2]),
        embedding_vector("emb", [3, 4, 5, 6]),
    ]
    assert r.usage.model_dump() == {"prompt_tokens": 6, "total_tokens": 6}


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "value", ["", [], [""], ["a", ""], [[]], [[1], []], ["a", 1], [1, "a"], [1.5], {"a": 1}, None]
)
def test_empty_or_malformed_input_is_400(client: httpx.Client, value: Any) -> None:
    r = client.post(EMB, json={"model": "emb", "input": value}, headers=OA_AUTH)
    assert (r.status_code, r.json()) == (400, BAD_INPUT)
    assert [(c["status"], c["fault"]) for c in calls(client)] == [(400, None)]


def test_sdk_raises_bad_request_for_an_empty_string(oa_sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oa_sdk.embeddings.create(model="emb", input="")
    assert caught.value.status_code == 400
    assert caught.value.body == BAD_INPUT["error"]


@pytest.mark.parametrize("dimensions", [0, -1, 1.5, "8", True, 65537])
def test_bad_dimensions_is_400(client: httpx.Client, dimensions: Any) -> None:
    body = {"model": "emb", "input": "x", "dimensions": dimensions}
    r = client.post(EMB, json=body, headers=OA_AUTH)
    assert (r.status_code, r.json()) == (
        400,
        error("dimensions: an integer from 1 to 65536 is required.", "dimensions"),
    )


def test_bad_encoding_format_is_400_and_null_means_float(client: httpx.Client) -> None:
    body: dict[str, Any] = {"model": "emb", "input": "x", "encoding_format": "int8"}
    r = client.post(EMB, json=body, headers=OA_AUTH)
    assert (r.status_code, r.json()) == (
        400,
        error("encoding_format: 'float' or 'base64' is required.", "encoding_format"),
    )
    body = {"model": "emb", "input": "x", "encoding_format": None, "dimensions": None}
    r = client.post(EMB, json=body, headers=OA_AUTH)
    assert r.json()["data"][0]["embedding"] == embedding_vector("emb", "x")


def test_missing_key_and_missing_model_are_refused(client: httpx.Client) -> None:
    r = client.post(EMB, json={"model": "emb", "input": "x"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    r = client.post(EMB, json={"input": "x"}, headers=OA_AUTH)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "model: a non-empty string is required."


# --------------------------------------------------------------------------- log and faults


def test_calls_log_records_path_model_key_stream_user_and_body(
    stub: Any, client: httpx.Client
) -> None:
    sdk = openai.OpenAI(base_url=stub.url + "/team/a/v1", api_key="sk-emb", max_retries=0)
    sdk.embeddings.create(model="emb", input=["a"], user="u-1", encoding_format="float")
    assert calls(client) == [
        {
            "seq": 1,
            "path": "/team/a/v1/embeddings",
            "shape": "openai",
            "model": "emb",
            "key": "sk-emb",
            "stream": False,
            "user": "u-1",
            "max_tokens": None,
            "fault": None,
            "status": 200,
            "body": {"model": "emb", "input": ["a"], "user": "u-1", "encoding_format": "float"},
            "traceparent": None,
        }
    ]


def test_status_faults_answer_in_openai_shape(oa_sdk: openai.OpenAI, client: httpx.Client) -> None:
    queue(client, {"kind": "429", "retry_after": 3}, {"kind": "500"})
    with pytest.raises(openai.RateLimitError) as caught:
        oa_sdk.embeddings.create(model="emb", input="x")
    assert caught.value.response.headers["retry-after"] == "3"
    assert caught.value.body == {
        "message": "Rate limit reached (stub fault).",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    with pytest.raises(openai.InternalServerError):
        oa_sdk.embeddings.create(model="emb", input="x")
    assert [(c["fault"], c["status"]) for c in calls(client)] == [("429", 429), ("500", 500)]


def test_drop_faults_close_without_a_response(client: httpx.Client) -> None:
    queue(client, {"kind": "fail_before_first_token"}, {"kind": "fail_after_tokens"})
    for _ in range(2):
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(EMB, json={"model": "emb", "input": "x"}, headers=OA_AUTH)
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("fail_before_first_token", None),
        ("fail_after_tokens", None),
    ]


def test_hang_and_slow_faults(client: httpx.Client) -> None:
    queue(client, {"kind": "hang"}, {"kind": "slow", "delay_ms": 150})
    with pytest.raises(httpx.ReadTimeout):
        client.post(EMB, json={"model": "emb", "input": "x"}, headers=OA_AUTH, timeout=0.3)
    start = time.monotonic()
    r = client.post(EMB, json={"model": "emb", "input": "x"}, headers=OA_AUTH)
    assert r.status_code == 200 and time.monotonic() - start >= 0.15
    assert [(c["fault"], c["status"]) for c in calls(client)] == [("hang", None), ("slow", 200)]


def test_invalid_input_is_refused_before_faults(client: httpx.Client) -> None:
    queue(client, {"kind": "500"})
    assert client.post(EMB, json={"model": "emb", "input": ""}, headers=OA_AUTH).status_code == 400
    assert client.get("/_stub/faults").json()["faults"][0]["kind"] == "500"


# --------------------------------------------------------------------------- CLI


def test_module_cli_serves_the_route_modules() -> None:
    # ``python -m stubvendor.server`` runs the file as __main__; the routes must share its state.
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    command = [sys.executable, "-m", "stubvendor.server", "--host", "127.0.0.1", "--port", "0"]
    with subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip().rsplit(" ", 1)[1]
            r = httpx.post(url + EMB, json={"model": "emb", "input": "x"}, headers=OA_AUTH)
            assert r.json()["data"][0]["embedding"] == embedding_vector("emb", "x")
            assert httpx.get(url + "/_stub/calls").json()["calls"][0]["path"] == EMB
        finally:
            proc.terminate()
        assert proc.wait(10) == 0
