"""A vendor refusing the request itself (a 4xx the client can fix): the message the adapters
keep of its error body, how the chain maps it (gateway/failures.py), and the chain rules it
obeys for a model request and a web action alike: no retry, no other key, link or platform,
no breaker failure, no bench. The world is test_chain_rules's: two vendors `a` and `b`."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from core import errors
from gateway.adapters.base import (
    ERROR_BODY_MAX_BYTES,
    REDACTED,
    VENDOR_MESSAGE_MAX_CHARS,
    ProviderError,
    error_for_status,
    vendor_message,
)
from gateway.adapters.fake import Fault
from gateway.attempts import PLATFORM, TEAM
from gateway.failures import judges_provider, refused_by_vendor, upstream_error, vendor_failure
from tests.unit.gateway.test_chain_rules import PLATFORM_KEY, World, trail

KINDS = pytest.mark.parametrize("kind", ["model", "web"])
IN_A_WORLD = pytest.mark.usefixtures("transactional_db")  # the world's tenant is in the database


# ---------------------------------------------------------------- the message kept


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # OpenAI (and OpenRouter, vLLM): error.message
        (
            {"error": {"message": "Invalid 'messages[0].role'.", "type": "invalid_request_error"}},
            "Invalid 'messages[0].role'.",
        ),
        # Anthropic: error.message under "type": "error"
        (
            {"type": "error", "error": {"type": "invalid_request_error", "message": "bad role"}},
            "bad role",
        ),
        # OpenRouter, with the upstream provider's raw body beside it: never passed on
        (
            {"error": {"code": 400, "message": "Provider refused", "metadata": {"raw": "{...}"}}},
            "Provider refused",
        ),
        ({"error": "model 'x' not found"}, "model 'x' not found"),  # Ollama, llama.cpp
        ({"object": "error", "message": "too long", "code": 400}, "too long"),
        ({"detail": "Not Found"}, "Not Found"),  # FastAPI
        (
            {"detail": [{"loc": ["body", "n"], "msg": "must be >= 1"}, {"msg": "extra field"}]},
            "must be >= 1; extra field",
        ),
        ({"error": {"message": 5}}, None),
        ({"unexpected": "shape"}, None),
        ([1, 2], None),
    ],
)
def test_the_message_is_taken_from_each_vendors_error_json(body, message):
    assert vendor_message(orjson.dumps(body)) == message


def test_a_body_that_is_not_json_gives_no_message():
    assert vendor_message(b"<html>502 Bad Gateway</html>") is None
    assert vendor_message(b"") is None


def test_control_and_invisible_characters_go_and_whitespace_collapses():
    body = {"error": {"message": "bad\x00 \x1b[31mfield\x1b[0m\n\n\t'x'\u202e\u200b done "}}

    assert vendor_message(orjson.dumps(body)) == "bad [31mfield [0m 'x' done"


def test_a_long_message_is_cut_at_the_cap():
    body = {"error": {"message": "word " * 1000}}

    message = vendor_message(orjson.dumps(body))

    assert message is not None
    assert len(message) == VENDOR_MESSAGE_MAX_CHARS
    assert message.endswith("word\u2026")


def test_the_calls_key_and_anything_shaped_like_a_credential_are_redacted():
    key = "sk-proj-Zq81abcdEFGH9876wxyz"
    said = (
        f"Key {key} is wrong; you sent sk-proj-Zq81*****wxyz, Bearer abc.def,"
        " and rk-live-12345678; a piece: abcdEFGH9876 and the word platform stays."
    )

    message = vendor_message(orjson.dumps({"error": {"message": said}}), api_key=key)

    assert message == (
        f"Key {REDACTED} is wrong; you sent {REDACTED}, {REDACTED} and {REDACTED}; a piece:"
        f" {REDACTED} and the word platform stays."
    )


def test_a_key_of_plain_words_does_not_redact_those_words():
    message = vendor_message(
        orjson.dumps({"error": {"message": "the platform refused it"}}),
        api_key="sk-platform-test-key-9f8e",
    )

    assert message == "the platform refused it"


def test_the_body_read_is_bounded():
    assert ERROR_BODY_MAX_BYTES == 64 * 1024  # what error_from_response reads at most


# ---------------------------------------------------------------- the mapping


def refusal(status: int, message: str | None = "no such field 'x'") -> ProviderError:
    error = error_for_status(status, {})
    error.vendor_message = message
    return error


@pytest.mark.parametrize("status", [400, 404, 405, 410, 413, 415, 422])
def test_a_request_the_vendor_refused_keeps_its_status_and_message(status):
    exc = refusal(status)

    error = upstream_error(exc)

    assert isinstance(error, errors.VendorRefused)
    assert (error.status, error.code, error.error_type) == (
        status,
        "LM-2002",
        "invalid_request_error",
    )
    assert error.message == (
        f"The upstream provider refused the request (HTTP {status}): no such field 'x'"
    )
    assert orjson.loads(error.body()) == {
        "error": {"message": error.message, "type": "invalid_request_error", "code": "LM-2002"}
    }
    assert error.headers() == [(b"x-should-retry", b"false")]
    assert not exc.retryable
    assert refused_by_vendor(exc)
    for served_by in (PLATFORM, TEAM):
        failed = vendor_failure(exc, served_by=served_by)
        assert (failed.judged, failed.ends_request) == (False, True)
        assert not judges_provider(exc, served_by=served_by)


def test_a_refusal_without_a_message_says_only_its_status():
    assert upstream_error(refusal(400, None)).message == (
        "The upstream provider refused the request (HTTP 400)."
    )


@pytest.mark.parametrize("status", [401, 402, 403, 408, 409, 429, 500, 503, 529])
def test_statuses_about_the_key_the_credit_the_rate_or_the_vendor_are_not_refusals(status):
    exc = refusal(status, "Incorrect API key provided: sk-abc")

    error = upstream_error(exc)

    assert not refused_by_vendor(exc)
    assert error.code in ("LM-3010", "LM-5001")
    assert "sk-abc" not in error.message
    assert not vendor_failure(exc, served_by=PLATFORM).ends_request


def test_a_refusal_is_an_upstream_outcome_that_bills_bandwidth():
    assert "LM-2002" not in errors.REFUSAL_CODES
    assert errors.meanings()["LM-2002"] == (
        "The upstream provider refused the request as invalid (its status and message)."
    )


# ---------------------------------------------------------------- the chain rules


@IN_A_WORLD
@KINDS
def test_a_platform_refusal_is_called_once_and_no_other_link_is_tried(kind):
    world = World(kind)
    world.vendors["a"].script(Fault("400", message="bad 'x'"), Fault("400"))

    ctx, answered = world.serve()

    assert isinstance(answered, errors.VendorRefused)
    assert answered.status == 400
    if kind == "model":  # the web adapters keep no vendor message
        assert answered.message == "The upstream provider refused the request (HTTP 400): bad 'x'"
    assert [c.api_key for c in world.vendors["a"].calls] == [PLATFORM_KEY]
    assert world.vendors["b"].calls == []
    assert trail(ctx) == [("a", PLATFORM, "refused_by_vendor")]
    assert [a.upstream_status for a in ctx.trail] == [400]


@IN_A_WORLD
@KINDS
def test_a_team_keys_refusal_benches_nothing_and_never_reaches_the_platform(kind):
    world = World(kind)
    world.team_pool("a", "team-1", "team-2", fallback=True)
    world.vendors["a"].script(Fault("422", key="team-1"))

    ctx, answered = world.serve()

    assert isinstance(answered, errors.VendorRefused)
    assert answered.status == 422
    assert [c.api_key for c in world.vendors["a"].calls] == ["team-1"]
    assert world.vendors["b"].calls == []
    assert trail(ctx) == [("a", TEAM, "refused_by_vendor")]
    # Not benched: the next request starts at the next key in turn, and team-1 follows.
    world.vendors["a"].calls.clear()
    world.vendors["a"].script(Fault("500", key="team-2"))
    world.serve()
    assert [c.api_key for c in world.vendors["a"].calls] == ["team-2", "team-1"]


@IN_A_WORLD
@KINDS
def test_many_refusals_open_no_breaker(kind):
    world = World(kind)
    refusals = world.breakers.threshold * 3
    for _ in range(refusals):
        world.vendors["a"].script(Fault("404"))
        _, answered = world.serve()
        assert isinstance(answered, errors.VendorRefused)

    ctx, answered = world.serve()

    assert not isinstance(answered, errors.GatewayError)
    assert trail(ctx) == [("a", PLATFORM, "ok")]
    assert len(world.vendors["a"].calls) == refusals + 1

    async def state():
        ticket = await world.breakers.acquire("a", "m" if kind == "model" else "web", lease_s=5)
        assert ticket is not None  # closed: a call is let through
        await world.breakers.release(ticket)

    asyncio.run(state())
