"""Team keys on the request path: round-robin, benching, fallback, chain lock, settlement."""

from __future__ import annotations

import httpx
import openai
import pytest

from accounts.models import Group
from billing.models import Reservation, Wallet
from byok.models import TeamKey
from tests.byok.helpers import Byok, team_keys
from tests.support.processes import INTERNAL_TOKEN
from tests.support.profiles import PLATFORM_KEY
from tests.support.services import requires_redis
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

HELLO = [{"role": "user", "content": "hello there"}]


def ask(stack, tenant, **kwargs):
    return stack.openai(tenant).chat.completions.create(
        model=kwargs.pop("model", "gpt-4o-mini"), messages=HELLO, **kwargs
    )


def keys_seen(stack) -> list[str]:
    return [c["key"] for c in stack.stub.vendor_calls()]


def test_team_keys_serve_round_robin_and_settle_at_zero_cost(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])
    wallet_before = Wallet.objects.get(account_id=tenant.account_id).balance_micro

    answers = [ask(stack, tenant) for _ in range(4)]

    assert [a.usage.completion_tokens for a in answers] == [8, 8, 8, 8]
    assert keys_seen(stack) == ["sk-team-a", "sk-team-b", "sk-team-a", "sk-team-b"]
    rows = usage_rows(group_id=tenant.group_id, expect=4)
    # The trail names the team key that served each, by its label.
    assert [
        [a.key_label for a in r.attempts] for r in sorted(rows, key=lambda r: r.created_at)
    ] == [["key-0"], ["key-1"], ["key-0"], ["key-1"]]
    assert {
        (
            r.served_by,
            r.tokens_in,
            r.tokens_out,
            r.byok_tokens_in,
            r.byok_tokens_out,
            r.provider_cost_micro,
        )
        for r in rows
    } == {("team", 0, 0, 2, 8, 0)}
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (0, 0, 0)
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == wallet_before
    assert Reservation.objects.count() == 0


def test_team_key_429_benches_key_and_tries_next(stack):
    tenant = stack.tenant()
    ids = team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])
    stack.stub.faults({"kind": "429", "retry_after": 5, "match": {"key": "sk-team-a"}})

    ask(stack, tenant)
    ask(stack, tenant)
    ask(stack, tenant)

    # a -> 429 (benched for max(5, 30) s), b serves; then only b while a sits on the bench.
    assert keys_seen(stack) == ["sk-team-a", "sk-team-b", "sk-team-b", "sk-team-b"]
    benched = wait_until(lambda: TeamKey.objects.get(pk=ids[0]).benched_until, what="bench")
    status = Byok(stack, tenant).list().json()["providers"][0]["keys"][0]["status"]
    assert status == "benched" and benched is not None


def test_team_key_401_marks_it_failing_and_tries_next(stack):
    tenant = stack.tenant()
    ids = team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])
    stack.stub.faults({"kind": "401", "match": {"key": "sk-team-a"}})

    answer = ask(stack, tenant)

    assert answer.usage.completion_tokens == 8
    assert keys_seen(stack) == ["sk-team-a", "sk-team-b"]
    wait_until(lambda: TeamKey.objects.get(pk=ids[0]).status == "failing", what="failing")
    ask(stack, tenant)
    assert keys_seen(stack)[-1] == "sk-team-b"


def test_no_usable_key_and_fallback_off_is_lm_3021_never_retried_never_billed(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])
    stack.stub.faults({"kind": "429", "retry_after": 60, "times": 2})

    with pytest.raises(openai.RateLimitError) as refused:
        ask(stack, tenant)

    assert refused.value.body["code"] == "LM-3021"
    assert keys_seen(stack) == ["sk-team-a", "sk-team-b"]  # no platform key, no retry
    with pytest.raises(openai.RateLimitError):
        ask(stack, tenant)
    assert len(stack.stub.vendor_calls()) == 2  # both keys benched: decided without a call
    rows = usage_rows(group_id=tenant.group_id, expect=2)
    assert [r.error_code for r in rows] == ["LM-3021", "LM-3021"]
    assert Group.objects.get(pk=tenant.group_id).spent_micro == 0


def test_fallback_on_reaches_the_platform_key_and_bills_it(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a"], fallback=True)
    stack.stub.faults({"kind": "429", "match": {"key": "sk-team-a"}})

    answer = ask(stack, tenant)

    assert answer.usage.completion_tokens == 8
    assert keys_seen(stack) == ["sk-team-a", PLATFORM_KEY]
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.served_by, row.tokens_in, row.tokens_out, row.provider_cost_micro) == (
        "platform",
        2,
        8,
        6,
    )
    assert [(a.served_by, a.source, a.outcome) for a in row.attempts] == [
        ("team", "stub-openai:gpt-4o-mini:team", "upstream_error"),
        ("platform", "stub-openai:gpt-4o-mini:platform-fallback", "ok"),
    ]
    assert Group.objects.get(pk=tenant.group_id).settled_micro == 6


def test_chain_lock_refuses_later_links_without_a_pool(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a"])  # fallback off
    stack.stub.faults({"kind": "429", "match": {"key": "sk-team-a"}})

    with pytest.raises(openai.RateLimitError) as refused:
        ask(stack, tenant, model="gpt-4o-mini,claude-3-5-haiku")

    # The team link's own pool ran out: LM-3021; the anthropic link is locked: never called.
    assert refused.value.body["code"] == "LM-3021"
    assert [c["model"] for c in stack.stub.vendor_calls()] == ["gpt-4o-mini"]


def test_chain_lock_after_an_upstream_failure_answers_that_failure(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a"])
    stack.stub.faults({"kind": "500", "times": 2, "match": {"key": "sk-team-a"}})

    with pytest.raises(openai.InternalServerError) as failed:
        ask(stack, tenant, model="gpt-4o-mini,claude-3-5-haiku")

    assert failed.value.status_code == 502 and failed.value.body["code"] == "LM-5001"
    assert keys_seen(stack) == ["sk-team-a", "sk-team-a"]  # two tries, then the locked link


def test_platform_only_links_before_the_team_link_still_run(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-anthropic", ["sk-ant-team"])
    stack.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}})

    answer = ask(stack, tenant, model="gpt-4o-mini,claude-3-5-haiku")

    assert answer.choices[0].message.content.endswith("claude-3-5-haiku-latest reply ok")
    assert keys_seen(stack) == [PLATFORM_KEY, PLATFORM_KEY, "sk-ant-team"]


def test_decide_shows_the_two_phase_plan(transactional_db, spawn_gateway, stub):
    stack = own_stack(spawn_gateway(TOLLGATE_MAX_ROUTE="3"), stub)  # a three-model chain
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"], fallback=True)
    team_keys(stack, tenant, "stub-anthropic", ["sk-ant"], fallback=False)

    plan = httpx.post(
        f"{stack.url}/internal/decide",
        headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"},
        json={
            "group": tenant.group_id,
            "request_id": "plan-1",
            "model": "gpt-4o-mini,claude-3-5-haiku,router-mini",
            "messages": HELLO,
            "max_tokens": 100,
        },
    ).json()

    links = [
        (
            link["provider"],
            link["breaker"],
            link["locked"],
            [
                (a["served_by"], a["source"], a["needs_escrow"], a["team_keys"])
                for a in link["attempts"]
            ],
        )
        for link in plan["links"]
    ]
    assert links == [
        (
            "stub-openai",
            f"stub-openai#group:{tenant.group_id}",
            False,
            [
                ("team", "stub-openai:gpt-4o-mini:team", False, 2),
                ("platform", "stub-openai:gpt-4o-mini:platform-fallback", True, 0),
            ],
        ),
        (
            "stub-anthropic",
            f"stub-anthropic#group:{tenant.group_id}",
            False,
            [("team", "stub-anthropic:claude-3-5-haiku:team", False, 1)],
        ),
        ("stub-router", "stub-router", True, []),
    ]
    escrow = plan["links"][0]["attempts"][1]["escrow_budget_micro"]
    # worst case: (11 prompt bytes + 8 + 8) x 0.15 + 100 x 0.60 = 64.05 -> 65, x1.2 -> 78
    assert escrow == 78
    assert stack.stub.vendor_calls() == []


def test_cost_ranked_fan_out_for_a_canonical_model(stack):
    from tests.support.profiles import install_profiles, stub_profiles

    spec = stub_profiles(stack.stub.url)
    cheap = {
        "name": "stub-cheap",
        "kind": "openai_compatible",
        "base_url": f"{stack.stub.url}/v1",
        "models": [
            {
                "name": "gpt-4o-mini",
                "upstream": "cheap-mini",
                "input_micro_per_mtok": 100_000,
                "output_micro_per_mtok": 400_000,
            }
        ],
    }
    install_profiles(stack.stub.url, [*spec, cheap])
    stack.gateway.reload()
    tenant = stack.tenant()
    stack.stub.faults({"kind": "500", "times": 2, "match": {"model": "cheap-mini"}})

    answer = ask(stack, tenant)

    assert [c["model"] for c in stack.stub.vendor_calls()] == [
        "cheap-mini",
        "cheap-mini",
        "gpt-4o-mini",
    ]
    assert answer.usage.completion_tokens == 8
    pinned = ask(stack, tenant, model="stub-openai/gpt-4o-mini")
    assert pinned.usage.completion_tokens == 8
    assert stack.stub.vendor_calls()[-1]["model"] == "gpt-4o-mini"


def test_pools_are_chosen_by_the_authenticated_group_only(stack):
    owner, other = stack.tenant(), stack.tenant()
    team_keys(stack, owner, "stub-openai", ["sk-owner-team"])

    ask(stack, other, extra_headers={"x-tollgate-group": str(owner.group_id)})
    with pytest.raises(openai.BadRequestError) as refused:
        ask(stack, other, extra_body={"group": owner.group_id})

    assert refused.value.body["code"] == "LM-2001"  # no field picks a pool
    assert keys_seen(stack) == [PLATFORM_KEY]


@requires_redis
def test_bench_state_is_shared_by_replicas(stack, spawn_gateway):
    second = spawn_gateway()
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a", "sk-team-b"])
    second.reload()
    stack.stub.faults({"kind": "429", "match": {"key": "sk-team-a"}})
    ask(stack, tenant)  # first replica benches a

    import openai as sdk

    other = sdk.OpenAI(base_url=f"{second.url}/v1", api_key=tenant.api_key, max_retries=0)
    for _ in range(3):
        other.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert keys_seen(stack) == ["sk-team-a", "sk-team-b", "sk-team-b", "sk-team-b", "sk-team-b"]
