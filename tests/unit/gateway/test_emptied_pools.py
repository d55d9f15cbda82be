"""A pool whose last key was removed answers like no pool, by its fallback flag: the platform
serves when it is on, LM-3021 (no attempt, no call) when it is off; never a team attempt with
no key in it, which could only say its keys are "benched" (gateway/attempts.py)."""

from __future__ import annotations

from byok.pools import Pool
from gateway.attempts import PLATFORM, TEAM
from gateway.plan import build_plan
from tests.unit.gateway.test_plan import (
    GROUP,
    attempts,
    catalog,
    no_pools,
    pool,
    pools,
    principal,
    request,
)


def emptied(provider: str, *, fallback: bool) -> Pool:
    return Pool(GROUP, provider, fallback, ())


def test_an_emptied_pool_with_fallback_on_is_served_by_the_platform_as_with_no_pool():
    with_none = build_plan(request("gpt-4o-mini"), principal(), catalog(), no_pools)
    plan = build_plan(
        request("gpt-4o-mini"),
        principal(),
        catalog(),
        pools(emptied("openai-main", fallback=True)),
    )

    [link] = plan.links
    assert (
        attempts(link)
        == attempts(with_none.links[0])
        == [(PLATFORM, "openai-main:gpt-4o-mini:platform", True, 78)]
    )
    # Served on the platform's keys, so judged by the platform's breaker, not the group's.
    assert (link.breaker_key, link.team_scoped, link.locked) == ("openai-main", False, False)
    assert plan.budget_estimate_micro == 78


def test_an_emptied_pool_with_fallback_off_has_no_attempt_and_locks_the_chain():
    plan = build_plan(
        request("gpt-4o-mini", "claude-3-5-haiku"),
        principal(),
        catalog(),
        pools(emptied("openai-main", fallback=False)),
    )

    first, second = plan.links
    # No attempt: the runner answers LM-3021 "its pool is empty" without a call.
    assert (first.attempts, first.locked, first.pool_exhausted_refusal) == ((), False, True)
    assert not first.calls_upstream
    # The tenant said no platform money for openai-main: later links do not reach it either.
    assert (second.attempts, second.locked) == ((), True)
    assert plan.budget_estimate_micro == 0


def test_a_pool_with_a_key_still_gets_its_team_attempt_first():
    plan = build_plan(
        request("gpt-4o-mini"),
        principal(),
        catalog(),
        pools(pool("openai-main", fallback=True)),
    )

    assert [a.served_by for a in plan.links[0].attempts] == [TEAM, PLATFORM]
    assert plan.links[0].breaker_key == f"openai-main#group:{GROUP}"


def test_an_emptied_pool_after_a_fallback_off_link_is_locked_like_no_pool():
    plan = build_plan(
        request("claude-3-5-haiku", "gpt-4o-mini"),
        principal(),
        catalog(),
        pools(pool("anthropic-main", fallback=False), emptied("openai-main", fallback=True)),
    )

    first, second = plan.links
    assert [a.served_by for a in first.attempts] == [TEAM]
    assert (second.attempts, second.locked) == ((), True)
