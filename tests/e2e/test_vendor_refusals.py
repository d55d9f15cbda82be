"""A vendor refusing the request itself (400, 404, 413, 422): the client gets the vendor's
status and message inside our error language (LM-2002), after exactly one vendor call, with
the official SDKs at their default retries; no fallback, no breaker, no bench; the money
exact to the micro-USD. Per vendor kind: openai, anthropic, openrouter, openai_compatible.

The gateway's breakers open at the first judged failure here (TOLLGATE_BREAKER_FAILURES=1),
so a refusal counted against a provider would show in every test that follows it.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from accounts.models import ApiKey, Group
from billing.models import Reservation, Wallet
from byok.models import TeamKey
from tests.byok.helpers import team_keys
from tests.support.metrics import metric
from tests.support.profiles import PLATFORM_KEY, api_profiles
from tests.support.stacks import own_stack
from tests.support.usage import chat, set_bandwidth_rate, settled
from tests.support.waits import wait_until

PROMPT = [{"role": "user", "content": "is this valid"}]
VENDOR_SAYS = "Invalid value for 'temperature': 7 is greater than the maximum of 2."
REFUSED = f"The upstream provider refused the request (HTTP 400): {VENDOR_SAYS}"
WALLET = 50_000_000
BUDGET = 40_000_000
# (vendor kind, the model clients ask for, the upstream model the stub sees, the profile)
KINDS = [
    ("openai", "gpt-4o-mini", "gpt-4o-mini", "stub-openai"),
    ("anthropic", "claude-3-5-haiku", "claude-3-5-haiku-latest", "stub-anthropic"),
    ("openrouter", "router-mini", "openai/gpt-4o-mini", "stub-router"),
    ("openai_compatible", "compat-mini", "local-mini", "stub-compat"),
]
PER_KIND = pytest.mark.parametrize(
    ("model", "upstream", "provider"), [k[1:] for k in KINDS], ids=[k[0] for k in KINDS]
)
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


@pytest.fixture(scope="module")
def touchy_gateway(module_gateways):
    return module_gateways(TOLLGATE_BREAKER_FAILURES="1")


@pytest.fixture
def rstack(transactional_db, touchy_gateway, stub):
    return own_stack(touchy_gateway, stub, api_profiles(stub.url))


def openai_client(stack, tenant) -> openai.OpenAI:
    """The SDK as applications run it: default retries (2), which a 5xx would set off."""
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=tenant.api_key)


def anthropic_client(stack, tenant) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key=tenant.api_key)


def refuse_next(stack, *, match: dict, kind: str = "400", times: int = 3) -> None:
    """Queue the vendor's refusal for more calls than one: a retry would meet it again."""
    stack.stub.faults({"kind": kind, "message": VENDOR_SAYS, "times": times, "match": match})


def trail(row) -> list[tuple]:
    return [(a.provider, a.served_by, a.outcome, a.upstream_status) for a in row.attempts]


def books(tenant) -> tuple:
    """Wallet (balance, reserved); group (spent, settled, reserved); key spent."""
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    group = Group.objects.get(pk=tenant.group_id)
    return (
        (wallet.balance_micro, wallet.reserved_micro),
        (group.spent_micro, group.settled_micro, group.reserved_micro),
        ApiKey.objects.get(pk=tenant.api_key_id).spent_micro,
    )


def assert_refused_once(stack, tenant, row, *, upstream: str, provider: str, stream: bool):
    """One vendor call on the platform key, recorded as the vendor's refusal, nothing billed."""
    [call] = stack.stub.vendor_calls()
    assert (call["model"], call["key"], call["fault"], call["status"], call["stream"]) == (
        upstream,
        PLATFORM_KEY,
        "400",
        400,
        stream,
    )
    assert (row.status, row.error_code, row.upstream_sent, row.streamed) == (
        400,
        "LM-2002",
        True,
        stream,
    )
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (0, 0, 0)
    assert (row.bandwidth_charge_micro, row.reservation_id) == (0, None)
    assert trail(row) == [(provider, "platform", "refused_by_vendor", 400)]
    [reservation] = Reservation.objects.filter(request_id=row.request_id)
    assert (reservation.status, reservation.committed_micro) == ("cancelled", 0)
    assert books(tenant) == ((WALLET, 0), (0, 0, 0), 0)


# ---------------------------------------------------------------- each vendor kind, each SDK


@PER_KIND
@STREAMED
def test_the_openai_sdk_gets_bad_request_with_the_vendors_message_after_one_call(
    rstack, model, upstream, provider, stream
):
    tenant = rstack.tenant(wallet_micro=WALLET, budget_micro=BUDGET)
    refuse_next(rstack, match={"model": upstream})

    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(rstack, tenant).chat.completions.create(
            model=model, messages=PROMPT, stream=stream
        )

    assert refused.value.status_code == 400
    assert refused.value.body == {
        "message": REFUSED,
        "type": "invalid_request_error",
        "code": "LM-2002",
    }
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert refused.value.response.headers["content-type"] == "application/json"
    [row] = settled(tenant, 1)
    assert row.request_id == refused.value.response.headers["x-tollgate-request-id"]
    assert_refused_once(rstack, tenant, row, upstream=upstream, provider=provider, stream=stream)


@PER_KIND
@STREAMED
def test_the_anthropic_sdk_gets_bad_request_in_anthropics_error_shape(
    rstack, model, upstream, provider, stream
):
    tenant = rstack.tenant(wallet_micro=WALLET, budget_micro=BUDGET)
    refuse_next(rstack, match={"model": upstream})

    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_client(rstack, tenant).messages.create(
            model=model, max_tokens=50, messages=PROMPT, stream=stream
        )

    assert refused.value.status_code == 400
    assert refused.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": REFUSED, "code": "LM-2002"},
    }
    [row] = settled(tenant, 1)
    assert refused.value.request_id == row.request_id  # Anthropic's `request-id`: our own id
    assert_refused_once(rstack, tenant, row, upstream=upstream, provider=provider, stream=stream)


@pytest.mark.parametrize(
    ("kind", "openai_error", "anthropic_error", "anthropic_type"),
    [
        ("404", openai.NotFoundError, anthropic.NotFoundError, "not_found_error"),
        ("413", openai.APIStatusError, anthropic.APIStatusError, "request_too_large"),
        (
            "422",
            openai.UnprocessableEntityError,
            anthropic.UnprocessableEntityError,
            "invalid_request_error",
        ),
    ],
)
def test_other_refusals_keep_the_vendors_status(
    rstack, kind, openai_error, anthropic_error, anthropic_type
):
    tenant = rstack.tenant()
    refuse_next(rstack, match={"model": "gpt-4o-mini"}, kind=kind)
    message = f"The upstream provider refused the request (HTTP {kind}): {VENDOR_SAYS}"

    with pytest.raises(openai_error) as on_chat:
        openai_client(rstack, tenant).chat.completions.create(model="gpt-4o-mini", messages=PROMPT)
    with pytest.raises(anthropic_error) as on_messages:
        anthropic_client(rstack, tenant).messages.create(
            model="gpt-4o-mini", max_tokens=50, messages=PROMPT
        )

    assert on_chat.value.status_code == on_messages.value.status_code == int(kind)
    assert on_chat.value.body == {
        "message": message,
        "type": "invalid_request_error",
        "code": "LM-2002",
    }
    assert on_messages.value.body == {
        "type": "error",
        "error": {"type": anthropic_type, "message": message, "code": "LM-2002"},
    }
    assert [c["status"] for c in rstack.stub.vendor_calls()] == [int(kind)] * 2
    rows = settled(tenant, 2)
    assert [(r.status, r.error_code) for r in rows] == [(int(kind), "LM-2002")] * 2


def test_what_the_vendor_says_is_cleaned_bounded_and_never_carries_the_key(rstack):
    tenant = rstack.tenant()
    said = f"bad\x00 input\n\u202e for key {PLATFORM_KEY}, Bearer abc123 " + "x" * 3000
    rstack.stub.faults({"kind": "400", "message": said, "match": {"model": "gpt-4o-mini"}})

    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(rstack, tenant).chat.completions.create(model="gpt-4o-mini", messages=PROMPT)

    message = refused.value.body["message"]
    assert message == (
        "The upstream provider refused the request (HTTP 400): bad input for key [redacted],"
        " [redacted] "
        + "x" * (500 - len("bad input for key [redacted], [redacted] ") - 1)
        + "\u2026"
    )
    assert PLATFORM_KEY not in refused.value.response.text
    settled(tenant, 1)
    assert PLATFORM_KEY not in rstack.gateway.log()
    assert "bad input" not in rstack.gateway.log()  # the vendor's text goes to the client only


# ---------------------------------------------------------------- no fallback, no breaker


@pytest.mark.parametrize(
    "route",
    [
        {"model": "gpt-4o-mini", "extra_body": {"fallback_model": "claude-3-5-haiku"}},
        {"model": "gpt-4o-mini,claude-3-5-haiku"},
        {"model": "gpt-4o-mini", "extra_headers": {"X-Tollgate-Fallback": "claude-3-5-haiku"}},
    ],
    ids=["fallback_model", "route-list", "fallback-header"],
)
def test_a_refusal_on_the_first_link_is_never_answered_by_the_next(rstack, route):
    tenant = rstack.tenant(wallet_micro=WALLET, budget_micro=BUDGET)
    refuse_next(rstack, match={"model": "gpt-4o-mini"})

    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(rstack, tenant).chat.completions.create(messages=PROMPT, **route)

    assert refused.value.body["code"] == "LM-2002"
    assert [c["model"] for c in rstack.stub.vendor_calls()] == ["gpt-4o-mini"]
    [row] = settled(tenant, 1)
    assert trail(row) == [("stub-openai", "platform", "refused_by_vendor", 400)]
    assert books(tenant) == ((WALLET, 0), (0, 0, 0), 0)


def test_many_refusals_leave_the_breaker_closed(rstack, touchy_gateway):
    tenant = rstack.tenant()
    refuse_next(rstack, match={"model": "gpt-4o-mini"}, times=6)
    client = openai_client(rstack, tenant)
    for _ in range(6):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT)

    answer = client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT)

    assert answer.choices[0].message.content == "Hello from the stub model gpt-4o-mini reply ok"
    assert len(rstack.stub.vendor_calls()) == 7  # one call each, and the seventh was let through
    assert (
        metric(
            touchy_gateway.url,
            "tollgate_circuit_state",
            provider="stub-openai",
            model="gpt-4o-mini",
        )
        == 0.0
    )
    rows = settled(tenant, 7)
    assert sorted(r.error_code for r in rows) == [""] + ["LM-2002"] * 6


# ---------------------------------------------------------------- team keys


def test_a_team_keys_refusal_benches_nothing_and_never_reaches_the_platform(rstack):
    tenant = rstack.tenant(wallet_micro=WALLET)
    ids = team_keys(rstack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"], fallback=True)
    rstack.stub.faults({"kind": "400", "message": VENDOR_SAYS, "match": {"key": "sk-team-a"}})
    client = openai_client(rstack, tenant)

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT)
    served = [client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT) for _ in "ab"]

    assert refused.value.body == {
        "message": REFUSED,
        "type": "invalid_request_error",
        "code": "LM-2002",
    }
    # a refused (no second key, no platform); then b and a again in turn: a is not benched.
    assert [c["key"] for c in rstack.stub.vendor_calls()] == ["sk-team-a", "sk-team-b", "sk-team-a"]
    assert [a.usage.completion_tokens for a in served] == [8, 8]
    assert [
        (k.status, k.benched_until) for k in TeamKey.objects.filter(pk__in=ids).order_by("pk")
    ] == [("active", None), ("active", None)]
    first, *_ = rows = sorted(settled(tenant, 3), key=lambda r: r.created_at)
    assert trail(first) == [("stub-openai", "team", "refused_by_vendor", 400)]
    assert [(r.status, r.served_by, r.byok_tokens_out) for r in rows] == [
        (400, "", 0),
        (200, "team", 8),
        (200, "team", 8),
    ]
    assert Reservation.objects.filter(wallet__account_id=tenant.account_id).count() == 0
    assert books(tenant) == ((WALLET, 0), (0, 0, 0), 0)


# ---------------------------------------------------------------- money, bandwidth included


@STREAMED
def test_a_refusal_bills_no_tokens_gives_the_holds_back_and_charges_its_bandwidth(rstack, stream):
    tenant = rstack.tenant(wallet_micro=WALLET, budget_micro=BUDGET)
    set_bandwidth_rate(tenant)  # 1 micro-USD per byte
    rstack.gateway.reload()
    refuse_next(rstack, match={"model": "claude-3-5-haiku-latest"}, kind="422", times=1)

    response, sent = chat(
        rstack.url,
        tenant,
        {"model": "claude-3-5-haiku", "max_tokens": 50, "messages": PROMPT, "stream": stream},
        path="/v1/messages",
    )

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "LM-2002"
    [row] = settled(tenant, 1)
    bandwidth = len(sent) + len(response.content)
    assert (row.bytes_in, row.bytes_out, row.bandwidth_charge_micro) == (
        len(sent),
        len(response.content),
        bandwidth,
    )
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (0, 0, 0)
    [reservation] = Reservation.objects.filter(request_id=row.request_id)
    assert (reservation.status, reservation.committed_micro) == ("cancelled", 0)
    # Bandwidth: on group and key spent, never settled; the wallet pays tokens only.
    wait_until(lambda: books(tenant)[1][0] == bandwidth, what="the bandwidth charge")
    assert books(tenant) == ((WALLET, 0), (bandwidth, 0, 0), bandwidth)
