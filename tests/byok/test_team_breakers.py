"""Team-scoped breakers: platform and team failures never judge each other."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.byok.helpers import team_keys
from tests.support.profiles import PLATFORM_KEY, install_profiles
from tests.support.services import clear_shared_state
from tests.support.stacks import Stack

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def tight(transactional_db, spawn_gateway, stub) -> Iterator[Stack]:
    """A gateway whose breakers open after 2 failures and cool down for 30 s."""
    stub.clear()
    clear_shared_state()
    install_profiles(stub.url)
    gateway = spawn_gateway(TOLLGATE_BREAKER_FAILURES="2", TOLLGATE_BREAKER_COOLDOWN_S="30")
    yield Stack(gateway=gateway, stub=stub)
    gateway.stop()
    clear_shared_state()


def ask(stack, tenant):
    return stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)


def code_of(stack, tenant) -> str:
    try:
        ask(stack, tenant)
    except openai.APIStatusError as exc:
        assert isinstance(exc.body, dict), exc.body
        return exc.body["code"]
    return "ok"


def circuit_series(stack) -> list[str]:
    metrics = httpx.get(f"{stack.url}/metrics").text
    return [line for line in metrics.splitlines() if line.startswith("tollgate_circuit_state{")]


def test_failing_team_keys_open_only_the_teams_breaker(tight):
    team, platform_user = tight.tenant(), tight.tenant()
    team_keys(tight, team, "stub-openai", ["sk-team-a"])
    tight.stub.faults({"kind": "500", "times": 4, "match": {"key": "sk-team-a"}})

    assert [code_of(tight, team) for _ in range(3)] == ["LM-5001", "LM-5001", "LM-5003"]
    assert code_of(tight, platform_user) == "ok"
    assert [c["key"] for c in tight.stub.vendor_calls()] == ["sk-team-a"] * 4 + [PLATFORM_KEY]
    assert circuit_series(tight) == [
        'tollgate_circuit_state{model="gpt-4o-mini",provider="stub-openai"} 0.0'
    ]


def test_platform_failures_never_open_a_teams_breaker(tight):
    team, platform_user = tight.tenant(), tight.tenant()
    team_keys(tight, team, "stub-openai", ["sk-team-a"])
    tight.stub.faults({"kind": "500", "times": 4, "match": {"key": PLATFORM_KEY}})

    assert [code_of(tight, platform_user) for _ in range(3)] == ["LM-5001", "LM-5001", "LM-5003"]
    assert code_of(tight, team) == "ok"
    assert circuit_series(tight) == [
        'tollgate_circuit_state{model="gpt-4o-mini",provider="stub-openai"} 2.0'
    ]


def test_a_team_link_ending_on_the_platform_key_is_judged_in_the_team_scope(tight):
    team, platform_user = tight.tenant(), tight.tenant()
    team_keys(tight, team, "stub-openai", ["sk-team-a"], fallback=True)
    tight.stub.faults(
        {"kind": "429", "times": 1, "match": {"key": "sk-team-a"}},
        {"kind": "500", "times": 4, "match": {"key": PLATFORM_KEY}},
    )

    # The team key is benched by its 429, then the platform fallback fails twice, twice.
    assert [code_of(tight, team) for _ in range(3)] == ["LM-5001", "LM-5001", "LM-5003"]
    assert code_of(tight, platform_user) == "ok"
