"""Every stub fault kind, streamed and not, with and without a fallback, through real HTTP.

Each case asserts the stub's exact call count per model (GET /_stub/calls) and exactly what
the client saw: status, error code, and the content. Deadlines are the profiles' own (1 s to
the answer or first chunk, 1 s between chunks), so hangs end in about two seconds (two tries).
"""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from dataclasses import dataclass

import httpx
import orjson
import pytest

from tests.support.profiles import PLATFORM_KEY, fast_profiles
from tests.support.sse import sse_events
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows

PRIMARY = "gpt-4o-mini"
FALLBACK = "claude-3-5-haiku"
FALLBACK_UPSTREAM = "claude-3-5-haiku-latest"
PROMPT = [{"role": "user", "content": "say six words please"}]
MAX_TOKENS = 6  # six words: the sixth is the model's name, so the content says who served it
PRIMARY_ANSWER = "Hello from the stub model gpt-4o-mini"
FALLBACK_ANSWER = f"Hello from the stub model {FALLBACK_UPSTREAM}"


@pytest.fixture
def fstack(transactional_db, tolerant_gateway, stub):
    # Failures here must never open a breaker: each case judges retries and fallback only.
    return own_stack(tolerant_gateway, stub, fast_profiles(stub.url, timeout_s=1, idle_s=1))


@dataclass(frozen=True)
class Seen:
    """What the client saw."""

    status: int
    code: str | None  # the error code (HTTP error or in-band stream error event)
    content: str
    done: bool  # a streamed answer ended properly ([DONE]); always True for a JSON answer


def ask(stack, tenant, *, stream: bool, fallback: bool) -> tuple[Seen, httpx.Response]:
    body = {"model": PRIMARY, "messages": PROMPT, "max_tokens": MAX_TOKENS, "stream": stream}
    if fallback:
        body["fallback_model"] = FALLBACK
    response = httpx.post(
        f"{stack.url}/v1/chat/completions",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
    )
    if response.headers["content-type"].startswith("application/json"):
        data = response.json()
        if response.status_code != 200:
            return Seen(response.status_code, data["error"]["code"], "", True), response
        return Seen(200, None, data["choices"][0]["message"]["content"], True), response
    content, code, done = "", None, False
    for _, data in sse_events(response.text):
        if data == "[DONE]":
            done = True
            continue
        event = orjson.loads(data)
        if "error" in event:
            code = event["error"]["code"]
            continue
        for choice in event["choices"]:
            content += choice["delta"].get("content") or ""
    return Seen(response.status_code, code, content, done), response


def calls_by_model(stub) -> dict[str, int]:
    return dict(Counter(call["model"] for call in stub.vendor_calls()))


# (kind, extra fault fields, stream) -> (primary calls, what the client sees without a
# fallback). With a fallback, a failure before the first token falls back to FALLBACK (one
# call, FALLBACK_ANSWER); anything the client already started receiving does not.
CASES = [
    # Non-streamed: a retryable failure is tried twice, a refused key once.
    ("429", {"retry_after": 1}, False, 2, Seen(429, "LM-3010", "", True)),
    ("401", {}, False, 1, Seen(502, "LM-5001", "", True)),
    ("403", {}, False, 1, Seen(502, "LM-5001", "", True)),
    ("500", {}, False, 2, Seen(502, "LM-5001", "", True)),
    ("hang", {}, False, 2, Seen(504, "LM-5002", "", True)),
    ("fail_before_first_token", {}, False, 2, Seen(502, "LM-5001", "", True)),
    ("fail_after_tokens", {"after_tokens": 2}, False, 2, Seen(502, "LM-5001", "", True)),
    # 6 tokens x 300 ms = 1.8 s to the answer, over the 1 s deadline.
    ("slow", {"delay_ms": 300}, False, 2, Seen(504, "LM-5002", "", True)),
    # Streamed: the same before the first token (an HTTP error, not an event stream) ...
    ("429", {"retry_after": 1}, True, 2, Seen(429, "LM-3010", "", True)),
    ("401", {}, True, 1, Seen(502, "LM-5001", "", True)),
    ("403", {}, True, 1, Seen(502, "LM-5001", "", True)),
    ("500", {}, True, 2, Seen(502, "LM-5001", "", True)),
    ("hang", {}, True, 2, Seen(504, "LM-5002", "", True)),
    ("fail_before_first_token", {}, True, 2, Seen(502, "LM-5001", "", True)),
    # ... but after the first token: no retry, no fallback, an error event ends the stream.
    ("fail_after_tokens", {"after_tokens": 2}, True, 1, Seen(200, "LM-5001", "Hello from", False)),
    # 300 ms between tokens is inside the 1 s idle deadline: a slow stream is served whole.
    ("slow", {"delay_ms": 300}, True, 1, Seen(200, None, PRIMARY_ANSWER, True)),
]


def _id(case) -> str:
    kind, _, stream, _, _ = case
    return f"{kind}-{'stream' if stream else 'json'}"


@pytest.mark.parametrize(
    ("kind", "extra", "stream", "primary_calls", "alone"), CASES, ids=[_id(c) for c in CASES]
)
def test_each_vendor_fault_costs_exact_calls_and_shows_the_client_exactly_this(
    fstack, kind, extra, stream, primary_calls, alone
):
    tenant = fstack.tenant()
    client_started = alone.status == 200
    outcomes = {}
    for fallback in (False, True):
        fstack.stub.clear()
        fstack.stub.faults({"kind": kind, "times": 2, "match": {"model": PRIMARY}, **extra})

        seen, response = ask(fstack, tenant, stream=stream, fallback=fallback)

        if fallback and not client_started:
            expected = Seen(200, None, FALLBACK_ANSWER, True)
            expected_calls = {PRIMARY: primary_calls, FALLBACK_UPSTREAM: 1}
        else:
            expected = alone
            expected_calls = {PRIMARY: primary_calls}
        assert (fallback, seen) == (fallback, expected)
        assert (fallback, calls_by_model(fstack.stub)) == (fallback, expected_calls)
        assert all(call["key"] == PLATFORM_KEY for call in fstack.stub.vendor_calls())
        if expected.status != 200:
            assert set(response.json()["error"]) == {"message", "type", "code"}
        # The usage row records the outcome: a stream broken after its start is a 502 there.
        row_status = 502 if expected.status == 200 and expected.code else expected.status
        outcomes[response.headers["x-request-id"]] = (row_status, expected.code or "")
    rows = usage_rows(list(outcomes), expect=2)
    assert {row.request_id: (row.status, row.error_code) for row in rows} == outcomes


def test_refused_platform_key_is_never_echoed_to_the_client_or_the_log(fstack):
    tenant = fstack.tenant()
    for kind in ("401", "403"):
        for model in (PRIMARY, FALLBACK):  # an OpenAI-shaped and an Anthropic-shaped vendor
            fstack.stub.clear()
            fstack.stub.faults({"kind": kind, "times": 1})

            response = httpx.post(
                f"{fstack.url}/v1/chat/completions",
                timeout=10,
                headers={"Authorization": f"Bearer {tenant.api_key}"},
                json={"model": model, "messages": PROMPT},
            )

            assert (response.status_code, response.json()["error"]) == (
                502,
                {
                    "message": f"The upstream provider failed (HTTP {kind}).",
                    "type": "api_error",
                    "code": "LM-5001",
                },
            )
            [call] = fstack.stub.vendor_calls()
            assert (call["fault"], call["status"], call["key"]) == (kind, int(kind), PLATFORM_KEY)
            assert "x-stub-echo-key" not in response.headers
            assert PLATFORM_KEY not in str(response.headers)
    assert PLATFORM_KEY not in fstack.gateway.log()


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A vendor that refuses every call with a fixed status (400 or 404), counting calls."""

    status = 400
    calls: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).calls.append(self.path)
        body = b'{"error": {"message": "refused: secret vendor detail", "type": "x"}}'
        self.send_response(type(self).status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def refusing_vendor():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Refusing.calls = []
    yield server
    server.shutdown()
    server.server_close()


def test_client_fault_statuses_are_never_retried(fstack, refusing_vendor):
    host, port = refusing_vendor.server_address
    own_stack(
        fstack.gateway,
        fstack.stub,
        [
            *fast_profiles(fstack.stub.url),
            {
                "name": "refusing",
                "kind": "openai_compatible",
                "base_url": f"http://{host}:{port}/v1",
                "timeout_s": 1,
                "models": [{"name": "refused-model"}],
            },
        ],
    )
    tenant = fstack.tenant()
    for status in (400, 404):
        for stream in (False, True):
            _Refusing.status, _Refusing.calls = status, []

            response = httpx.post(
                f"{fstack.url}/v1/chat/completions",
                timeout=10,
                headers={"Authorization": f"Bearer {tenant.api_key}"},
                json={"model": "refused-model", "messages": PROMPT, "stream": stream},
            )

            # The vendor's status and message, in our language (LM-2002); never its body.
            assert (response.status_code, response.json()) == (
                status,
                {
                    "error": {
                        "message": f"The upstream provider refused the request (HTTP {status}):"
                        " refused: secret vendor detail",
                        "type": "invalid_request_error",
                        "code": "LM-2002",
                    }
                },
            )
            assert (status, stream, _Refusing.calls) == (status, stream, ["/v1/chat/completions"])
    assert "secret vendor detail" not in fstack.gateway.log()
