"""Traces over OTLP/HTTP to a receiver that decodes the real protobuf, and the overhead header.

One module gateway exports to the receiver (batches every 50 ms); a second samples nothing
(`traceidratio` at 0); a third exports to a collector that is not there. Exact attributes,
the parent/child structure, the client's trace id, and the traceparent each vendor call
carried (the stub records it) are asserted.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import time

import httpx
import pytest

from tests.support.metrics import metric_samples
from tests.support.otlp import OtlpReceiver, Span
from tests.support.processes import free_port
from tests.support.profiles import fast_profiles
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows
from tests.support.web import install_web_profiles, web, web_profiles

PROMPT = [{"role": "user", "content": "the secret prompt words"}]
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
OVERHEAD = re.compile(r"^\d+\.\d\d$")
SERVER, CLIENT = 2, 3  # the protocol's SpanKind values
# docs/observability.md's settings, verbatim: run by bash, then handed to a gateway (with
# the receiver's address for the collector's or Langfuse's).
COLLECTOR_SETTINGS = """
export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
export OTEL_SERVICE_NAME=tollgate
export OTEL_TRACES_SAMPLER=parentbased_traceidratio
export OTEL_TRACES_SAMPLER_ARG=1
"""
LANGFUSE_SETTINGS = """
export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://cloud.langfuse.com/api/public/otel/v1/traces
export LANGFUSE_AUTH=$(printf '%s' "$LANGFUSE_PUBLIC_KEY:$LANGFUSE_SECRET_KEY" | base64 -w0)
export OTEL_EXPORTER_OTLP_HEADERS="Authorization=Basic%20$LANGFUSE_AUTH"
"""


def settings_of(block: str, **given: str) -> dict[str, str]:
    """Run a documented block in bash; return the OTEL_* variables it exported."""
    done = subprocess.run(
        ["bash", "-c", f"{block}\nenv -0"],
        env={"PATH": os.environ["PATH"], **given},
        capture_output=True,
        text=True,
        check=True,
    )
    pairs = (entry.partition("=") for entry in done.stdout.split("\0") if entry)
    return {name: value for name, _, value in pairs if name.startswith("OTEL_")}


@pytest.fixture(scope="module")
def receiver():
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


def otel_env(endpoint: str, **more: str) -> dict[str, str]:
    """The documented collector settings, at `endpoint`, exporting every 50 ms."""
    return {
        **settings_of(COLLECTOR_SETTINGS),
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        **more,
    }


@pytest.fixture(scope="module")
def traced_gateway(module_gateways, receiver):
    return module_gateways(**otel_env(receiver.url), TOLLGATE_MAX_ROUTE="3")


@pytest.fixture
def tstack(transactional_db, traced_gateway, stub, receiver):
    receiver.release()
    receiver.clear()
    return own_stack(traced_gateway, stub, fast_profiles(stub.url, timeout_s=5, idle_s=5))


def by_name(spans: list[Span]) -> dict[str, Span]:
    return {s.name: s for s in spans}


def request_span(spans: list[Span]) -> Span:
    [root] = [s for s in spans if s.kind == SERVER]
    return root


def test_a_chat_request_is_a_span_with_genai_attributes_under_the_clients_parent(tstack, receiver):
    tenant = tstack.tenant()
    client = tstack.openai(tenant, default_headers={"traceparent": CLIENT_PARENT})

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=PROMPT)

    completion = raw.parse()
    request_id = raw.headers["x-tollgate-request-id"]
    assert OVERHEAD.match(raw.headers["x-tollgate-overhead-ms"])
    [row] = usage_rows([request_id], expect=1)
    spans = receiver.trace_of(request_id, count=5)
    root = request_span(spans)
    assert (root.trace_id, root.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    assert root.name == "chat gpt-4o-mini"
    assert root.service == "tollgate"
    assert root.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": completion.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": completion.usage.completion_tokens,
        "gen_ai.response.finish_reasons": ("stop",),
        "tollgate.request_id": request_id,
        "tollgate.route": "chat",
        "tollgate.provider": "stub-openai",
        "tollgate.served_by": "platform",
        "tollgate.cost_micro_usd": row.provider_cost_micro,
        "tollgate.bandwidth_charge_micro_usd": row.bandwidth_charge_micro,
        "tollgate.cache": "bypass",
        "tollgate.attempts": 1,
        "tollgate.streamed": False,
        "tollgate.account_id": tenant.account_id,
        "tollgate.group_id": tenant.group_id,
        "tollgate.api_key_id": tenant.api_key_id,
        "http.response.status_code": 200,
    }
    assert row.provider_cost_micro > 0
    children = by_name([s for s in spans if s is not root])
    assert sorted(children) == ["admission", "attempt 1 stub-openai", "hold", "settlement"]
    assert {s.parent_span_id for s in children.values()} == {root.span_id}
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}
    attempt = children["attempt 1 stub-openai"]
    assert attempt.kind == CLIENT
    assert attempt.attributes == {
        "tollgate.attempt": 1,
        "tollgate.provider": "stub-openai",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "tollgate.served_by": "platform",
        "tollgate.outcome": "ok",
        "http.response.status_code": 200,
    }
    [call] = tstack.stub.vendor_calls()
    assert call["traceparent"] == f"00-{CLIENT_TRACE}-{attempt.span_id}-01"
    # In order, inside the request span.
    order = [children[n] for n in ("admission", "hold", "attempt 1 stub-openai", "settlement")]
    assert all(a.end_ns <= b.start_ns for a, b in zip(order, order[1:], strict=False))
    assert root.start_ns <= order[0].start_ns and order[-1].end_ns <= root.end_ns
    assert not any("secret prompt" in str(s.attributes) for s in spans)


def test_a_web_search_sends_the_vendor_its_attempt_span_as_traceparent(tstack, receiver):
    install_web_profiles(web_profiles(tstack.stub.url, direct=False, render=False))
    tstack.gateway.reload()
    tenant = tstack.tenant(wallet_micro=1_000_000)

    answer = web(
        tstack.url,
        tenant.api_key,
        "search",
        {"query": "llm gateways", "max_results": 2},
        headers={"traceparent": CLIENT_PARENT},
    )

    assert answer.status_code == 200, answer.text
    spans = receiver.trace_of(answer.headers["x-tollgate-request-id"], count=2)
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}
    [attempt] = [s for s in spans if s.kind == CLIENT]
    assert attempt.parent_span_id == request_span(spans).span_id
    [call] = tstack.stub.calls()
    assert call["path"] == "/web/v1/search"
    assert call["traceparent"] == f"00-{CLIENT_TRACE}-{attempt.span_id}-01"


def test_a_stream_has_its_stream_span_and_time_to_first_token(tstack, receiver):
    tenant = tstack.tenant()
    client = tstack.anthropic(tenant)
    before = metric_samples(tstack.url)

    with client.messages.with_streaming_response.create(
        model="claude-3-5-haiku", max_tokens=50, messages=PROMPT, stream=True
    ) as response:
        overhead = response.headers["x-tollgate-overhead-ms"]
        request_id = response.headers["x-tollgate-request-id"]
        text = "".join(line for line in response.iter_lines())

    assert OVERHEAD.match(overhead)
    assert "Hello" in text
    [row] = usage_rows([request_id], expect=1)
    spans = receiver.trace_of(request_id, count=6)
    root = request_span(spans)
    assert root.name == "chat claude-3-5-haiku"
    assert len(root.trace_id) == 32 and root.parent_span_id == ""
    assert root.attributes["gen_ai.provider.name"] == "anthropic"
    assert root.attributes["gen_ai.usage.input_tokens"] == row.tokens_in
    assert root.attributes["gen_ai.usage.output_tokens"] == row.tokens_out
    assert root.attributes["tollgate.cost_micro_usd"] == row.provider_cost_micro
    assert root.attributes["tollgate.streamed"] is True
    assert root.attributes["tollgate.ttft_ms"] == row.ttft_ms
    assert root.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    names = sorted(s.name for s in spans if s is not root)
    assert names == ["admission", "attempt 1 stub-anthropic", "hold", "settlement", "stream"]
    attempt = by_name(spans)["attempt 1 stub-anthropic"]
    assert attempt.attributes["tollgate.ttft_ms"] > 0
    assert "gen_ai.output.messages" not in root.attributes
    after = metric_samples(tstack.url)

    def count(samples, name, labels):
        return samples.get((name, labels), 0.0)

    ttft = ("tollgate_time_to_first_token_seconds_count", (("provider", "stub-anthropic"),))
    overhead_count = ("tollgate_gateway_overhead_seconds_count", (("route", "messages"),))
    assert count(after, *ttft) - count(before, *ttft) == 1
    assert count(after, *overhead_count) - count(before, *overhead_count) == 1


def test_content_capture_on_exports_the_prompt_and_the_answer(tstack, receiver):
    from accounts.models import Account
    from accounts.services import account_changed

    tenant = tstack.tenant()
    Account.objects.filter(pk=tenant.account_id).update(trace_content=True)
    account_changed(account_id=tenant.account_id)
    client = tstack.openai(tenant)

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=PROMPT)
    streamed_raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=PROMPT, stream=True
    )
    chunks = list(streamed_raw.parse())

    answer = raw.parse().choices[0].message.content
    whole = request_span(receiver.trace_of(raw.headers["x-tollgate-request-id"], count=5))
    assert "the secret prompt words" in whole.attributes["gen_ai.input.messages"]
    assert answer in whole.attributes["gen_ai.output.messages"]
    streamed_text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    streamed = request_span(
        receiver.trace_of(streamed_raw.headers["x-tollgate-request-id"], count=6)
    )
    assert streamed.attributes["tollgate.streamed"] is True
    assert "the secret prompt words" in streamed.attributes["gen_ai.input.messages"]
    assert streamed_text in streamed.attributes["gen_ai.output.messages"]


def test_a_fallback_chain_is_one_trace_with_an_attempt_span_per_call(tstack, receiver):
    tenant = tstack.tenant()
    tstack.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}})

    response = httpx.post(
        f"{tstack.url}/v1/chat/completions",
        headers={
            "Authorization": f"Bearer {tenant.api_key}",
            "traceparent": CLIENT_PARENT,
            "X-Tollgate-Fallback": "gpt-4o",
        },
        json={"model": "gpt-4o-mini", "messages": PROMPT},
        timeout=20,
    )

    assert response.status_code == 200
    request_id = response.headers["x-tollgate-request-id"]
    spans = receiver.trace_of(request_id, count=7)
    root = request_span(spans)
    attempts = sorted(
        (s for s in spans if s.kind == CLIENT), key=lambda s: s.attributes["tollgate.attempt"]
    )
    assert [
        (
            a.attributes["gen_ai.request.model"],
            a.attributes["tollgate.outcome"],
            a.attributes["http.response.status_code"],
        )
        for a in attempts
    ] == [
        ("gpt-4o-mini", "upstream_error", 500),
        ("gpt-4o-mini", "upstream_error", 500),
        ("gpt-4o", "ok", 200),
    ]
    assert {a.parent_span_id for a in attempts} == {root.span_id}
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}
    assert root.attributes["tollgate.attempts"] == 3
    assert [a.status_code for a in attempts] == [2, 2, 0]
    assert [c["traceparent"] for c in tstack.stub.vendor_calls()] == [
        f"00-{CLIENT_TRACE}-{a.span_id}-01" for a in attempts
    ]


def test_every_proxied_answer_says_its_overhead_errors_too(tstack, receiver):
    tenant = tstack.tenant()
    auth = {"Authorization": f"Bearer {tenant.api_key}"}
    url = tstack.url
    answers = [
        httpx.post(
            f"{url}/v1/chat/completions",
            headers=auth,
            json={"model": "gpt-4o-mini", "messages": PROMPT},
        ),
        httpx.post(
            f"{url}/v1/embeddings", headers=auth, json={"model": "embed-small", "input": "x"}
        ),
        httpx.post(
            f"{url}/v1/responses", headers=auth, json={"model": "gpt-4o-mini", "input": "hi"}
        ),
        httpx.post(f"{url}/v1/chat/completions", json={"model": "gpt-4o-mini"}),  # 401
        httpx.post(
            f"{url}/v1/messages", headers=auth, json={"model": "nope", "messages": PROMPT}
        ),  # 400
        httpx.post(f"{url}/v1/web/scrape", headers=auth, json={"url": "http://127.0.0.1:1/"}),
    ]

    assert [a.status_code >= 200 for a in answers] == [True] * len(answers)
    for answer in answers:
        assert OVERHEAD.match(answer.headers["x-tollgate-overhead-ms"]), answer.text
    assert float(answers[0].headers["x-tollgate-overhead-ms"]) < 1000
    # A web action is traced like a model request: its own span, named for its route.
    web = answers[-1]
    spans = receiver.trace_of(web.headers["x-tollgate-request-id"], count=1)
    root = request_span(spans)
    assert root.name == "web.scrape"
    assert root.attributes["tollgate.route"] == "web.scrape"
    assert root.attributes["http.response.status_code"] == web.status_code
    assert "gen_ai.operation.name" not in root.attributes


def test_a_hanging_collector_never_slows_a_request(tstack, receiver):
    tenant = tstack.tenant()
    client = tstack.openai(tenant)
    receiver.hang()
    try:
        started = time.monotonic()
        for _ in range(20):
            client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT)
        assert time.monotonic() - started < 5  # an export waits up to 5 s: none waited on it
    finally:
        receiver.release()


@pytest.fixture(scope="module")
def silent_gateway(module_gateways, receiver):
    """Samples nothing: `traceidratio` at 0."""
    return module_gateways(
        **otel_env(receiver.url, OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0")
    )


def test_a_sampler_at_zero_exports_nothing(transactional_db, silent_gateway, stub, receiver):
    stack = own_stack(silent_gateway, stub, fast_profiles(stub.url, timeout_s=5, idle_s=5))
    receiver.clear()
    tenant = stack.tenant()
    raw = stack.openai(tenant).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=PROMPT
    )

    request_id = raw.headers["x-tollgate-request-id"]
    usage_rows([request_id], expect=1)
    [call] = stack.stub.vendor_calls()
    silent_gateway.stop()  # a stopping gateway exports what it queued first
    assert receiver.spans() == []
    assert call["traceparent"] is None


def test_a_dead_collector_never_fails_a_request(transactional_db, module_gateways, stub):
    gateway = module_gateways(**otel_env(f"http://127.0.0.1:{free_port()}"))
    stack = own_stack(gateway, stub, fast_profiles(stub.url, timeout_s=5, idle_s=5))
    client = stack.openai(stack.tenant())

    started = time.monotonic()
    answers = [
        client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT) for _ in range(20)
    ]

    assert all(a.choices[0].message.content for a in answers)
    assert time.monotonic() - started < 5


def test_langfuse_settings_send_its_basic_auth_to_its_otel_path(
    transactional_db, module_gateways, stub, receiver
):
    settings = settings_of(
        LANGFUSE_SETTINGS, LANGFUSE_PUBLIC_KEY="pk-lf-1", LANGFUSE_SECRET_KEY="sk-lf-2"
    )
    endpoint = settings["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    settings["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint.replace(
        "https://cloud.langfuse.com", receiver.url
    )
    gateway = module_gateways(**settings, OTEL_BSP_SCHEDULE_DELAY="50")
    stack = own_stack(gateway, stub, fast_profiles(stub.url, timeout_s=5, idle_s=5))
    receiver.clear()
    raw = stack.openai(stack.tenant()).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=PROMPT
    )

    receiver.trace_of(raw.headers["x-tollgate-request-id"], count=5)
    [seen] = receiver.headers_seen
    assert seen["path"] == "/api/public/otel/v1/traces"
    assert seen["authorization"] == "Basic " + base64.b64encode(b"pk-lf-1:sk-lf-2").decode()
