"""A webhook guardrail's call (gateway/guard_hooks.py) against a real endpoint on 127.0.0.1:
the body and its signature as the endpoint checks them, its verdicts, every way it can fail
to give one (each a failure with its reason, never a verdict), and a tenant's URL resolved
once, checked and pinned while the operator's is called as configured."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime

import aiohttp
import orjson
import pytest

from gateway.guard_hooks import CheckOutcome, check_with_webhook
from guardrails.selectors import GuardrailSpec
from tests.support.fakedns import scripted_names
from tests.support.guardrail_receivers import FLAGGED, GuardrailReceiver, Reply, late
from tests.unit.gateway.test_cache_rules import in_a_loop

SECRET = "whsec_guard-hooks-test-secret"
LOOPBACK = ("127.0.0.1/32",)


def hook_spec(url: str, *, operators: bool = False, **fields) -> GuardrailSpec:
    values = {
        "id": 7,
        "name": "pii-vendor",
        "kind": "webhook",
        "phase": "input",
        "action": "block",
        "detectors": (),
        "patterns": (),
        "words": (),
        "moderation_model": "",
        "moderation_threshold": None,
        "webhook_url": url,
        "webhook_secret": SECRET,
        "deadline_ms": 2000,
        "fail_mode": "open",
        "updated_at": datetime(2026, 12, 7, tzinfo=UTC),
        "operators": operators,
        **fields,
    }
    return GuardrailSpec(**values)


@pytest.fixture
def hook():
    receiver = GuardrailReceiver(secret=SECRET)
    yield receiver
    receiver.close()


async def ask(spec: GuardrailSpec, *, allow_nets=LOOPBACK, texts=("hello", "world")):
    async with aiohttp.ClientSession() as session:
        return await check_with_webhook(
            spec,
            phase="input",
            texts=list(texts),
            request_id="req_1",
            session=session,
            allow_nets=allow_nets,
        )


def test_the_call_is_the_documented_body_signed_with_the_guardrails_secret(hook):
    hook.replies = [FLAGGED]

    @in_a_loop
    async def run():
        assert await ask(hook_spec(hook.url)) == CheckOutcome(flagged=True, matches=2)

    run()
    [call] = hook.received
    assert call.signed is True
    assert call.body == (
        b'{"guardrail":"pii-vendor","phase":"input","request_id":"req_1","texts":["hello","world"]}'
    )
    assert call.host == f"127.0.0.1:{hook.port}"


def test_a_call_signed_with_another_secret_is_refused_by_the_endpoint(hook):
    @in_a_loop
    async def run():
        outcome = await ask(hook_spec(hook.url, webhook_secret="whsec_stale"))
        assert outcome == CheckOutcome(failure="its endpoint answered 401")

    run()
    assert [call.signed for call in hook.received] == [False]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b'{"flagged": false}', CheckOutcome()),
        (b'{"flagged": false, "matches": 4}', CheckOutcome()),  # clean means none found
        (b'{"flagged": true}', CheckOutcome(flagged=True, matches=1)),
        (b'{"flagged": true, "matches": 0}', CheckOutcome(flagged=True, matches=1)),
        (b'{"flagged": true, "matches": 5, "vendor": "x"}', CheckOutcome(flagged=True, matches=5)),
        (  # read whole, however many chunks it comes in
            b'{"flagged": true, "matches": 3, "pad": "' + b"x" * 60_000 + b'"}',
            CheckOutcome(flagged=True, matches=3),
        ),
    ],
)
def test_the_endpoints_answer_is_the_verdict(hook, answer, expected):
    hook.replies = [Reply(body=answer)]

    @in_a_loop
    async def run():
        assert await ask(hook_spec(hook.url)) == expected

    run()


NOT_FLAGGED = 'its answer was not {"flagged": true|false}'
NOT_A_COUNT = 'its answer\'s "matches" was not a count'


@pytest.mark.parametrize(
    ("reply", "failure"),
    [
        (Reply(status=503), "its endpoint answered 503"),
        (Reply(status=302, body=b""), "its endpoint answered 302"),  # never followed
        (Reply(body=b"<html>ok</html>"), NOT_FLAGGED),
        (Reply(body=b'{"flagged": "yes"}'), NOT_FLAGGED),
        (Reply(body=b"[true]"), NOT_FLAGGED),
        (Reply(body=b""), NOT_FLAGGED),
        (Reply(body=b'{"flagged": true, "matches": -1}'), NOT_A_COUNT),
        (Reply(body=b'{"flagged": true, "matches": 1.5}'), NOT_A_COUNT),
        (Reply(body=b'{"flagged": false, "pad": "' + b"x" * 70_000 + b'"}'), NOT_FLAGGED),
    ],
)
def test_an_answer_outside_the_protocol_is_a_failure_not_a_verdict(hook, reply, failure):
    hook.replies = [reply]

    @in_a_loop
    async def run():
        outcome = await ask(hook_spec(hook.url))
        assert (outcome, outcome.failed) == (CheckOutcome(failure=failure), True)

    run()


def test_an_endpoint_past_the_deadline_is_a_failure_when_the_deadline_passes(hook):
    hook.replies = [late(2.0)]

    @in_a_loop
    async def run():
        started = time.monotonic()
        outcome = await ask(hook_spec(hook.url, deadline_ms=300))
        waited = time.monotonic() - started
        assert outcome == CheckOutcome(failure="no answer within 300 ms")
        assert 0.3 <= waited < 1.0

    run()


def test_an_endpoint_nobody_listens_at_is_a_failure():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]

    @in_a_loop
    async def run():
        outcome = await ask(hook_spec(f"http://127.0.0.1:{port}/check"))
        assert outcome == CheckOutcome(failure="its endpoint could not be reached")

    run()


def test_a_tenants_url_to_a_refused_address_is_never_called_the_operators_is(hook):
    @in_a_loop
    async def run():
        tenants = await ask(hook_spec(hook.url), allow_nets=())
        assert tenants == CheckOutcome(failure="its endpoint's address is not one Tollgate calls")
        assert hook.received == []
        # The operator configured its own endpoint, wherever it is (a sidecar Presidio).
        assert await ask(hook_spec(hook.url, operators=True), allow_nets=()) == CheckOutcome()

    run()
    assert [call.signed for call in hook.received] == [True]


@pytest.fixture
def names(monkeypatch):
    """name -> the addresses its successive lookups answer (the last one repeats)."""
    return scripted_names(monkeypatch)


def test_a_tenants_name_is_resolved_once_and_called_at_that_address_by_name(names, hook):
    answers, asked = names
    answers["guard.example"] = ["127.0.0.1"]
    url = f"http://guard.example:{hook.port}/check"

    @in_a_loop
    async def run():
        assert await ask(hook_spec(url)) == CheckOutcome()

    run()
    [call] = hook.received
    assert (call.host, call.signed) == (f"guard.example:{hook.port}", True)
    assert orjson.loads(call.body)["texts"] == ["hello", "world"]
    assert asked == ["guard.example"]


def test_a_name_rebound_after_its_check_is_not_asked_again(names, hook):
    answers, asked = names
    # Allowed: 127.0.0.2 (nothing listens there). Refused: 127.0.0.1, where the hook listens.
    answers["rebind.example"] = ["127.0.0.2", "127.0.0.1"]
    url = f"http://rebind.example:{hook.port}/check"

    @in_a_loop
    async def run():
        outcome = await ask(hook_spec(url), allow_nets=("127.0.0.2/32",))
        assert outcome == CheckOutcome(failure="its endpoint could not be reached")

    run()
    assert hook.received == []
    assert asked == ["rebind.example"]
