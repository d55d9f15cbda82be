"""The web plan on a catalog built in memory (which profiles, in which order, with which
attempts and escrow), the fake web profile, and the daily unit budget's counter."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from byok.pools import Pool, PoolKey
from core.errors import DailyUnitsExhausted, InvalidRequest
from core.money import with_margin_micro
from core.shared_state import SharedState
from gateway.attempts import PLATFORM, TEAM
from gateway.auth import Principal
from gateway.catalog import Catalog, WebProfile
from gateway.web.adapters import WEB_ADAPTERS, FakeWeb
from gateway.web.plan import build_web_plan
from gateway.web.types import PAGE, QUERY, RENDERED_PAGE, SCRAPE, SEARCH, WebRequest, WebTarget
from gateway.web.units import DailyUnits, seconds_to_next_day

GROUP = 7


def web_profile(name: str, kind: str, prices: dict[str, int], **fields: Any) -> WebProfile:
    values: dict[str, Any] = {
        "platform_key": None if kind in ("direct_http", "fake") else f"sk-{name}",
        "allows_platform": True,
        "timeout_s": 5.0,
        "respect_robots": True,
    }
    values.update(fields)
    adapter = WEB_ADAPTERS[kind](
        base_url=f"https://{name}.example",
        session=None,  # type: ignore[arg-type]  # building a call never touches it
    )
    return WebProfile(name=name, kind=kind, prices=prices, adapter=adapter, **values)


def catalog(*profiles: WebProfile) -> Catalog:
    return Catalog(profiles={}, offers_by_model={}, web={p.name: p for p in profiles})


def principal(**fields) -> Principal:
    values = {
        "account_id": 1,
        "billing_mode": "prepaid",
        "group_id": GROUP,
        "group_budget_max_micro": None,
        "group_rpm": None,
        "group_tpm": None,
        "group_concurrency": None,
        "bandwidth_micro_per_gb": 0,
    }
    return Principal(**{**values, **fields})


def no_pools(group_id: int, provider: str) -> Pool | None:
    return None


DIRECT = web_profile("direct", "direct_http", {PAGE: 100})
RENDER_B = web_profile("render-b", "render_api", {RENDERED_PAGE: 2_000})
RENDER_A = web_profile("render-a", "render_api", {RENDERED_PAGE: 3_000})
SEARCH_P = web_profile("search", "search_api", {QUERY: 5_000})
FAKE = web_profile("fake", "fake", {PAGE: 1})
SCRAPE_URL = WebRequest(action=SCRAPE, url="https://example.com/")


def test_scrape_tries_our_fetcher_then_a_fake_then_the_renderers_by_name():
    plan = build_web_plan(
        SCRAPE_URL, principal(), catalog(RENDER_B, SEARCH_P, FAKE, RENDER_A, DIRECT), no_pools
    )

    assert [(link.profile.name, link.unit, link.price_micro) for link in plan.links] == [
        ("direct", PAGE, 100),
        ("fake", PAGE, 1),
        ("render-a", RENDERED_PAGE, 3_000),
        ("render-b", RENDERED_PAGE, 2_000),
    ]
    assert [link.judged for link in plan.links] == [False, True, True, True]
    # Worst case: every platform link bills its unit, x1.2.
    assert plan.budget_estimate_micro == with_margin_micro(5_101, margin_pct=120) == 6_122
    assert [a.escrow_budget_micro for link in plan.links for a in link.attempts] == [
        120,
        2,
        3_600,
        2_400,
    ]


def test_render_js_goes_to_the_renderers_only_and_search_to_the_search_profiles():
    every = catalog(DIRECT, RENDER_A, SEARCH_P, FAKE)
    rendered = build_web_plan(
        WebRequest(action=SCRAPE, url="https://x.example/", render_js=True),
        principal(),
        every,
        no_pools,
    )
    search = build_web_plan(
        WebRequest(action=SEARCH, query="q", max_results=3),
        principal(),
        catalog(DIRECT, RENDER_A, SEARCH_P, web_profile("fake-q", "fake", {QUERY: 7})),
        no_pools,
    )

    assert [link.profile.name for link in rendered.links] == ["render-a"]
    assert [(link.profile.name, link.unit) for link in search.links] == [
        ("fake-q", QUERY),
        ("search", QUERY),
    ]


def test_no_profile_for_the_action_is_lm_2001():
    with pytest.raises(InvalidRequest, match="No web profile serves a renderer"):
        build_web_plan(
            WebRequest(action=SCRAPE, url="https://x/", render_js=True),
            principal(),
            catalog(DIRECT),
            no_pools,
        )
    with pytest.raises(InvalidRequest, match="No web profile serves search"):
        build_web_plan(
            WebRequest(action=SEARCH, query="q", max_results=1),
            principal(),
            catalog(DIRECT),
            no_pools,
        )


def test_a_team_pool_serves_first_and_its_fallback_flag_decides_the_platform():
    team = PoolKey(1, "team-1", "sk-team-1")

    def pools(fallback: bool):
        return lambda group, name: (
            Pool(GROUP, name, fallback, (team,)) if name == "render-a" else None
        )

    locked = build_web_plan(
        SCRAPE_URL, principal(), catalog(DIRECT, RENDER_A, RENDER_B), pools(False)
    )
    open_ = build_web_plan(
        SCRAPE_URL, principal(), catalog(DIRECT, RENDER_A, RENDER_B), pools(True)
    )

    assert [[a.served_by for a in link.attempts] for link in locked.links] == [
        [PLATFORM],
        [TEAM],
        [],
    ]
    assert [link.locked for link in locked.links] == [False, False, True]  # the chain lock
    assert locked.links[1].breaker_key == f"render-a#group:{GROUP}"
    assert [[a.served_by for a in link.attempts] for link in open_.links] == [
        [PLATFORM],
        [TEAM, PLATFORM],
        [PLATFORM],
    ]


def test_an_invoiced_account_needs_no_escrow_and_a_platform_off_profile_has_no_attempt():
    plan = build_web_plan(
        SCRAPE_URL,
        principal(billing_mode="invoiced"),
        catalog(
            DIRECT, web_profile("render-c", "render_api", {RENDERED_PAGE: 9}, allows_platform=False)
        ),
        no_pools,
    )

    assert [a.needs_escrow for a in plan.links[0].attempts] == [False]
    assert plan.links[1].attempts == ()
    assert plan.budget_estimate_micro == 120


def test_the_fake_web_profile_answers_a_page_and_results_without_a_network():
    fake = FakeWeb(base_url="", session=None)
    target = WebTarget(api_key=None, timeout_s=1)

    page = asyncio.run(fake.scrape("https://x.example/a", target))
    results = asyncio.run(fake.search("Two Words", 2, target))

    assert (page.status, page.content_type, page.final_url) == (
        200,
        "text/html",
        "https://x.example/a",
    )
    assert b"The fake web page of https://x.example/a." in page.body
    assert [r["url"] for r in results.results] == [
        "https://fake.example/two-words/1",
        "https://fake.example/two-words/2",
    ]


@pytest.mark.parametrize("backend_kind", ["process", "redis"])
def test_the_daily_counter_takes_gives_back_and_refuses_until_midnight(
    backend_kind, clock, tag, settings
):
    from tests.support.services import HAS_REDIS, delete_redis_keys

    if backend_kind == "redis" and not HAS_REDIS:
        pytest.skip("needs Redis")
    if backend_kind == "process":
        settings.REDIS_URL = ""
    clock.now = datetime(2026, 12, 1, 23, 59, 0, tzinfo=UTC).timestamp()
    group = int(tag[-6:], 16)  # a group id of this test alone

    async def run():
        shared = SharedState()
        units = DailyUnits(shared, clock=clock)
        first = await units.take(group, 2)
        await units.take(group, 2)
        with pytest.raises(DailyUnitsExhausted) as refused:
            await units.take(group, 2)
        await units.give_back(first)  # a call that billed nothing
        again = await units.take(group, 2)
        clock.advance(61)  # the next UTC day: a new count
        tomorrow = [await units.take(group, 2), await units.take(group, 2)]
        await shared.close()
        return refused.value, again, tomorrow

    try:
        refused, again, tomorrow = asyncio.run(run())
    finally:
        if backend_kind == "redis":
            delete_redis_keys(f"tollgate:wu:{group}:*")
    assert refused.code == "LM-3004"
    assert refused.retry_after_s == 60
    assert again is not None and all(t is not None for t in tomorrow)
    assert (again.local, tomorrow[0].local) == ((backend_kind == "process",) * 2)


def test_no_cap_takes_nothing():
    assert asyncio.run(DailyUnits(SharedState()).take(1, None)) is None
    assert seconds_to_next_day(datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC).timestamp()) == 86_399
