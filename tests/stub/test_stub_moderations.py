"""The stub's OpenAI moderations route (stubvendor/moderations.py), through the official SDK."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import openai
import pytest

from stubvendor.moderations import CATEGORIES

from ._support import OA_AUTH

MOD = "/v1/moderations"
QUIET = dict.fromkeys(CATEGORIES, 0.0001)
CLEAN = {
    "flagged": False,
    "categories": dict.fromkeys(CATEGORIES, False),
    "category_scores": QUIET,
}
BAD_INPUT = {
    "error": {
        "message": "input: a non-empty string, a list of non-empty strings or a list of "
        "text and image_url items is required.",
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }
}


def queue(client: httpx.Client, *faults: dict[str, Any]) -> None:
    assert client.post("/_stub/faults", json={"faults": list(faults)}).status_code == 200


def calls(client: httpx.Client) -> list[dict[str, Any]]:
    return client.get("/_stub/calls").json()["calls"]


def verdict(**changes: tuple[float, bool]) -> dict[str, Any]:
    """CLEAN with some categories scored (and flagged or not)."""
    categories = dict.fromkeys(CATEGORIES, False)
    scores = dict(QUIET)
    for name, (score, flagged) in changes.items():
        scores[name], categories[name] = score, flagged
    return {
        "flagged": any(categories.values()),
        "categories": categories,
        "category_scores": scores,
    }


def test_thirteen_categories_are_openais() -> None:
    assert CATEGORIES == (
        "harassment",
        "harassment/threatening",
        "hate",
        "hate/threatening",
        "illicit",
        "illicit/violent",
        "self-harm",
        "self-harm/intent",
        "self-harm/instructions",
        "sexual",
        "sexual/minors",
        "violence",
        "violence/graphic",
    )


def test_trigger_words_score_and_flag_one_result_per_text(client: httpx.Client) -> None:
    texts = ["a quiet day", "a VIOLENT storm", "so Hateful.", "how rude", "nonviolent rudeness"]
    r = client.post(MOD, json={"model": "omni", "input": texts}, headers=OA_AUTH)

    body = r.json()
    assert r.status_code == 200
    assert re.fullmatch(r"modr-stub-\d+", body.pop("id"))
    assert body == {
        "model": "omni",
        "results": [
            CLEAN,
            verdict(violence=(0.91, True)),
            verdict(hate=(0.85, True)),
            verdict(harassment=(0.3, False)),
            CLEAN,  # whole words only
        ],
        "usage": {"prompt_tokens": 12, "total_tokens": 12},  # 3 + 3 + 2 + 2 + 2 words
    }


def test_sdk_reads_the_answer_and_a_string_is_one_text(oa_sdk: openai.OpenAI) -> None:
    answer = oa_sdk.moderations.create(model="omni", input="violent and hateful")

    assert answer.model == "omni"
    [result] = answer.results
    assert result.flagged is True
    assert (result.categories.violence, result.categories.hate) == (True, True)
    assert result.categories.harassment is False
    assert (result.category_scores.violence, result.category_scores.hate) == (0.91, 0.85)
    assert result.category_scores.self_harm == 0.0001
    assert answer.model_extra is not None
    assert answer.model_extra["usage"] == {"prompt_tokens": 3, "total_tokens": 3}


def test_a_multimodal_list_is_one_text_and_images_add_nothing(client: httpx.Client) -> None:
    items = [
        {"type": "text", "text": "so violent"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "rude"},
    ]
    r = client.post(MOD, json={"model": "omni", "input": items}, headers=OA_AUTH)

    assert r.json()["results"] == [verdict(violence=(0.91, True), harassment=(0.3, False))]
    assert r.json()["usage"] == {"prompt_tokens": 3, "total_tokens": 3}


def test_usage_counts_at_least_one_token(client: httpx.Client) -> None:
    r = client.post(MOD, json={"model": "omni", "input": "   "}, headers=OA_AUTH)
    assert r.json()["usage"] == {"prompt_tokens": 1, "total_tokens": 1}


@pytest.mark.parametrize(
    "value",
    [
        "",
        [],
        [""],
        ["a", 1],
        [{"type": "text", "text": ""}],
        [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
        [{"type": "audio"}],
        ["a", {"type": "text", "text": "b"}],
        None,
        {"a": 1},
    ],
)
def test_empty_or_malformed_input_is_400_before_faults(client: httpx.Client, value: Any) -> None:
    queue(client, {"kind": "500"})
    r = client.post(MOD, json={"model": "omni", "input": value}, headers=OA_AUTH)
    assert (r.status_code, r.json()) == (400, BAD_INPUT)
    assert [(c["status"], c["fault"]) for c in calls(client)] == [(400, None)]
    assert client.get("/_stub/faults").json()["faults"][0]["kind"] == "500"


def test_calls_log_records_the_call_under_any_prefix(stub: Any, client: httpx.Client) -> None:
    sdk = openai.OpenAI(base_url=stub.url + "/compat/v1", api_key="sk-mod", max_retries=0)
    sdk.moderations.create(model="omni", input=["a"])
    assert calls(client) == [
        {
            "seq": 1,
            "path": "/compat/v1/moderations",
            "shape": "openai",
            "model": "omni",
            "key": "sk-mod",
            "stream": False,
            "user": None,
            "max_tokens": None,
            "fault": None,
            "status": 200,
            "body": {"model": "omni", "input": ["a"]},
            "traceparent": None,
        }
    ]


def test_missing_key_and_missing_model_are_refused(client: httpx.Client) -> None:
    r = client.post(MOD, json={"model": "omni", "input": "x"})
    assert (r.status_code, r.json()["error"]["code"]) == (401, "invalid_api_key")
    r = client.post(MOD, json={"input": "x"}, headers=OA_AUTH)
    assert (r.status_code, r.json()["error"]["message"]) == (
        400,
        "model: a non-empty string is required.",
    )


def test_faults_apply_as_to_embeddings(oa_sdk: openai.OpenAI, client: httpx.Client) -> None:
    queue(
        client,
        {"kind": "500", "match": {"model": "omni"}},
        {"kind": "fail_before_first_token"},
        {"kind": "hang"},
        {"kind": "slow", "delay_ms": 150},
    )
    with pytest.raises(openai.InternalServerError):
        oa_sdk.moderations.create(model="omni", input="x")
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(MOD, json={"model": "omni", "input": "x"}, headers=OA_AUTH)
    with pytest.raises(httpx.ReadTimeout):
        client.post(MOD, json={"model": "omni", "input": "x"}, headers=OA_AUTH, timeout=0.3)
    start = time.monotonic()
    r = client.post(MOD, json={"model": "omni", "input": "x"}, headers=OA_AUTH)
    assert r.status_code == 200 and time.monotonic() - start >= 0.15
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("500", 500),
        ("fail_before_first_token", None),
        ("hang", None),
        ("slow", 200),
    ]
