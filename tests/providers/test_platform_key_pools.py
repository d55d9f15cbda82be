"""Several platform keys per profile: strategies, vendor limits, 429 benches, 401 takes out.

A real gateway (its keys read from its environment) in front of the stub, which records the
key of every call; the usage rows' attempt trails name the key that made each call.
"""

from __future__ import annotations

import threading
import time

import openai
import pytest

from audit.models import AuditEntry
from gateway.management.commands.seed_demo import STUB_AWS_CREDENTIALS
from providers.models import PlatformKey, ProviderProfile
from tests.support.metrics import metric
from tests.support.profiles import PLATFORM_KEY, install_profiles
from tests.support.services import clear_shared_state, requires_postgres, requires_redis
from tests.support.stacks import Stack
from tests.support.usage import usage_rows
from tests.support.waits import wait_until
from usage.models import UsageLog

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(90)]

KEYS = {"PK_A": "sk-pool-key-a-0001", "PK_B": "sk-pool-key-b-0002"}
A, B = KEYS["PK_A"], KEYS["PK_B"]
# The stub's Bedrock credentials as AWS's own variables name them (no session token set).
AWS_ID, AWS_SECRET = STUB_AWS_CREDENTIALS.split(":")
AWS_ENV = {"AWS_ACCESS_KEY_ID": AWS_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET}
HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def pool_gateway(module_gateways):
    return module_gateways(**KEYS, **AWS_ENV)


def pooled(
    stack_parts, name: str, keys: list[dict], *, strategy: str = "round_robin", own_key=True
) -> Stack:
    """Serve model `name` from a profile `name` of the given platform keys (and the profile's
    own key, labelled `profile`, unless `own_key` is off)."""
    gateway, stub = stack_parts
    stub.clear()
    clear_shared_state()
    spec = [
        {
            "name": name,
            "kind": "openai",
            "base_url": f"{stub.url}/v1",
            "timeout_s": 5,
            "key_strategy": strategy,
            "platform_keys": keys,
            "models": [
                {"name": name, "input_micro_per_mtok": 150_000, "output_micro_per_mtok": 600_000}
            ],
        }
    ]
    install_profiles(stub.url, spec)
    if not own_key:
        ProviderProfile.objects.filter(name=name).update(api_key_sealed=None, api_key_last4="")
    gateway.reload()
    return Stack(gateway=gateway, stub=stub)


@pytest.fixture
def parts(transactional_db, pool_gateway, stub):
    return pool_gateway, stub


def ask(stack: Stack, tenant, model: str, **kwargs):
    return stack.openai(tenant).chat.completions.create(model=model, messages=HELLO, **kwargs)


def keys_seen(stack: Stack) -> list[str]:
    return [c["key"] for c in stack.stub.vendor_calls()]


def trails(group_id: int, expect: int) -> list[list[tuple[str, str, int | None]]]:
    """Each row's attempts, in request order: (key label, outcome, upstream status)."""
    rows = usage_rows(group_id=group_id, expect=expect)
    return [
        [(a.key_label, a.outcome, a.upstream_status) for a in row.attempts]
        for row in sorted(rows, key=lambda r: r.created_at)
    ]


def test_round_robin_spreads_calls_over_every_key_and_the_trail_names_each(parts):
    stack = pooled(
        parts,
        "pool-rr",
        [{"label": "a", "api_key_env": "PK_A"}, {"label": "b", "api_key_env": "PK_B"}],
    )
    tenant = stack.tenant()

    answers = [ask(stack, tenant, "pool-rr") for _ in range(6)]

    assert [a.usage.completion_tokens for a in answers] == [8] * 6
    assert keys_seen(stack) == [PLATFORM_KEY, A, B] * 2
    assert trails(tenant.group_id, 6) == [
        [(label, "ok", 200)] for label in ["profile", "a", "b"] * 2
    ]
    # The trail names keys by label: no secret reaches the stored attempts.
    stored = [a.key_label for row in UsageLog.objects.all() for a in row.attempts]
    assert not any(secret[-8:] in label for label in stored for secret in (A, B, PLATFORM_KEY))


def test_weighted_keys_share_calls_by_weight_interleaved(parts):
    stack = pooled(
        parts,
        "pool-weighted",
        [
            {"label": "a", "api_key_env": "PK_A", "weight": 3},
            {"label": "b", "api_key_env": "PK_B", "weight": 1},
        ],
        strategy="weighted",
        own_key=False,
    )
    tenant = stack.tenant()

    for _ in range(8):
        ask(stack, tenant, "pool-weighted")

    # Smooth weighted round robin: 3 of every 4 calls on a, b's between them, never a run.
    assert keys_seen(stack) == [A, A, B, A] * 2


def test_least_in_flight_sends_calls_past_a_busy_key(parts):
    stack = pooled(
        parts,
        "pool-lif",
        [{"label": "a", "api_key_env": "PK_A"}, {"label": "b", "api_key_env": "PK_B"}],
        strategy="least_in_flight",
        own_key=False,
    )
    tenant = stack.tenant()
    # Key a's first call streams slowly: it stays in flight, past its first token, while the
    # others are asked.
    stack.stub.faults({"kind": "slow", "delay_ms": 400, "match": {"key": A}})
    first_token, slow_done = threading.Event(), threading.Event()

    def slow_stream() -> None:
        for chunk in ask(stack, tenant, "pool-lif", stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                first_token.set()
        slow_done.set()

    slow = threading.Thread(target=slow_stream)
    slow.start()
    assert first_token.wait(10), "the slow stream sent no token"
    for _ in range(3):
        ask(stack, tenant, "pool-lif")
    busy_meanwhile = not slow_done.is_set()
    slow.join(30)

    assert busy_meanwhile, "the slow call ended before the others were asked"
    # Round robin would have sent the second call to a; least in flight keeps a's queue empty
    # for as long as its stream lasts.
    assert keys_seen(stack) == [A, B, B, B]


def test_a_429_benches_the_key_for_its_retry_after_and_the_next_key_serves(parts):
    stack = pooled(
        parts,
        "pool-429",
        [{"label": "a", "api_key_env": "PK_A"}, {"label": "b", "api_key_env": "PK_B"}],
        own_key=False,
    )
    tenant = stack.tenant()
    stack.stub.faults({"kind": "429", "retry_after": 30, "match": {"key": A}})

    answers = [ask(stack, tenant, "pool-429") for _ in range(3)]

    assert [a.usage.completion_tokens for a in answers] == [8, 8, 8]
    # a -> 429, benched for its 30 s: b serves the first request and every one after it.
    assert keys_seen(stack) == [A, B, B, B]
    assert trails(tenant.group_id, 3) == [
        [("a", "upstream_error", 429), ("b", "ok", 200)],
        [("b", "ok", 200)],
        [("b", "ok", 200)],
    ]
    assert PlatformKey.objects.get(label="a", profile__name="pool-429").status == "active"


def test_a_401_takes_the_key_out_marks_it_failing_and_tells_the_operator(parts):
    stack = pooled(
        parts,
        "pool-401",
        [{"label": "a", "api_key_env": "PK_A"}, {"label": "b", "api_key_env": "PK_B"}],
        own_key=False,
    )
    tenant = stack.tenant()
    stack.stub.faults({"kind": "401", "match": {"key": A}})

    ask(stack, tenant, "pool-401")
    key = wait_until(
        lambda: (
            PlatformKey.objects.filter(label="a", profile__name="pool-401", status="failing")
            .select_related("profile")
            .first()
        ),
        what="the refused key marked failing",
    )
    for _ in range(2):
        ask(stack, tenant, "pool-401")

    assert keys_seen(stack) == [A, B, B, B]
    entry = AuditEntry.objects.get(action="platformkey.failed", target_id=str(key.pk))
    assert (entry.actor_kind, entry.target_label) == ("system", "pool-401/a")
    assert entry.after["vendor_status"] == 401 and entry.after["status"] == "failing"
    assert (
        metric(
            stack.url,
            "tollgate_platform_key_refused_total",
            profile="pool-401",
            key="a",
            status="401",
        )
        == 1.0
    )
    # Taken out for good: a reload loads no failing key; an operator puts it back.
    stack.gateway.reload()
    ask(stack, tenant, "pool-401")
    assert keys_seen(stack)[-1] == B
    assert trails(tenant.group_id, 4)[0] == [("a", "upstream_error", 401), ("b", "ok", 200)]


def test_a_keys_vendor_limits_are_kept_before_the_call(parts):
    stack = pooled(
        parts,
        "pool-rpm",
        [
            {"label": "a", "api_key_env": "PK_A", "rpm": 1},
            {"label": "b", "api_key_env": "PK_B", "rpm": 1},
        ],
        own_key=False,
    )
    tenant = stack.tenant()
    # The limits count per minute: start at the top of one, so all three fall in it.
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)

    ask(stack, tenant, "pool-rpm")
    ask(stack, tenant, "pool-rpm")
    with pytest.raises(openai.RateLimitError) as refused:
        ask(stack, tenant, "pool-rpm")

    assert keys_seen(stack) == [A, B]  # the third call never reached the vendor
    body = refused.value.response.json()
    assert body["error"]["code"] == "LM-3010"
    assert "at its vendor limits" in body["error"]["message"]
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60


def test_the_pool_is_in_the_profile_json_and_checked(transactional_db):
    from django.core.exceptions import ImproperlyConfigured

    from providers.spec import profiles_bootstrap

    base = {"name": "pool-json", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}
    with pytest.raises(ImproperlyConfigured, match="label 'profile'"):
        profiles_bootstrap(
            spec=[{**base, "platform_keys": [{"label": "profile", "api_key_env": "X"}]}]
        )
    with pytest.raises(ImproperlyConfigured, match="'rpm' must be a non-negative integer"):
        profiles_bootstrap(
            spec=[{**base, "platform_keys": [{"label": "a", "api_key_env": "X", "rpm": -1}]}]
        )
    with pytest.raises(ImproperlyConfigured, match="'key_strategy' must be one of"):
        profiles_bootstrap(spec=[{**base, "key_strategy": "random"}])
    profiles_bootstrap(
        spec=[{**base, "platform_keys": [{"label": "a", "api_key_env": "X", "tpm": 9000}]}]
    )
    profiles_bootstrap(
        spec=[{**base, "platform_keys": [{"label": "a", "api_key_env": "X", "tpm": 12000}]}]
    )
    profiles_bootstrap(spec=[{**base, "platform_keys": []}])
    assert not PlatformKey.objects.filter(profile__name="pool-json").exists()
    # Each change the JSON made is on the audit trail, as the admin's are.
    trail = [
        (e.action, e.target_label, (e.before or {}).get("tpm"), (e.after or {}).get("tpm"))
        for e in AuditEntry.objects.filter(target_type="platform_key").order_by("id")
    ]
    assert trail == [
        ("platformkey.add", "pool-json/a", None, 9000),
        ("platformkey.update", "pool-json/a", 9000, 12000),
        ("platformkey.delete", "pool-json/a", 12000, None),
    ]


def test_a_key_may_be_several_variables_as_bedrock_reads_aws_credentials(parts):
    gateway, stub = parts
    stub.clear()
    clear_shared_state()
    install_profiles(
        stub.url,
        [
            {
                "name": "aws-env",
                "kind": "bedrock",
                "base_url": stub.url,
                "region": "us-east-1",
                "api_key_env": "AWS_ACCESS_KEY_ID:AWS_SECRET_ACCESS_KEY:AWS_SESSION_TOKEN",
                "models": [
                    {
                        "name": "aws-env-haiku",
                        "upstream": "anthropic.claude-3-5-haiku-20241022-v1:0",
                        "input_micro_per_mtok": 800_000,
                        "output_micro_per_mtok": 4_000_000,
                    }
                ],
            }
        ],
    )
    # install_profiles sealed the test key into the profile: the variables are to serve.
    ProviderProfile.objects.filter(name="aws-env").update(api_key_sealed=None)
    gateway.reload()
    stack = Stack(gateway=gateway, stub=stub)

    answer = ask(stack, stack.tenant(), "aws-env-haiku")

    assert answer.usage.completion_tokens == 8
    # The stub checked the SigV4 signature made with the variables' secret.
    assert keys_seen(stack) == [AWS_ID]
