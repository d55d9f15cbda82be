"""Web actions' own fleet-wide in-flight cap (TOLLGATE_WEB_INFLIGHT_MAX), apart from the model
routes' (TOLLGATE_INFLIGHT_MAX): two real gateway replicas sharing Redis, scrapes of a page
that takes 3 s to arrive holding every web slot, while many more scrapes are refused LM-3003
before any fetch and chat completions (the official SDK) are served all the same.
"""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from django.conf import settings

from tests.support.profiles import install_profiles
from tests.support.services import HAS_REDIS, requires_redis
from tests.support.waits import wait_until
from tests.support.web import WEB_ENV, web_profiles, web_stack

CAP = 3  # both caps: a shared cap would refuse every chat below while the scrapes hold it
SLOW_PAGE = "/slow?s=3"


@pytest.fixture(scope="module")
def capped_fleet(module_gateways):
    if not HAS_REDIS:
        pytest.skip("needs Redis: set REDIS_URL")
    env = {**WEB_ENV, "TOLLGATE_WEB_INFLIGHT_MAX": str(CAP), "TOLLGATE_INFLIGHT_MAX": str(CAP)}
    return [module_gateways(**env) for _ in range(2)]


@pytest.fixture
def fleet(transactional_db, capped_fleet, stub, site):
    stack = web_stack(capped_fleet[0], stub, site, web_profiles(stub.url, render=False))
    install_profiles(stub.url)  # the chat models beside the web profiles
    for gateway in capped_fleet:
        gateway.reload()
    return stack


def web_slots() -> int:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return client.zcard("tollgate:rl:inflight:web")
    finally:
        client.close()


async def scrape(client: httpx.AsyncClient, url: str, key: str, path: str) -> httpx.Response:
    return await client.post(
        f"{url}/v1/web/scrape",
        headers={"Authorization": f"Bearer {key}"},
        json={"url": path},
    )


async def chat(url: str, key: str) -> str:
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) as client:
        answer = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}]
        )
    return answer.choices[0].message.content or ""


@requires_redis
def test_web_at_its_cap_is_refused_while_chat_is_still_served(fleet, capped_fleet, site):
    a, b = capped_fleet
    tenant = fleet.tenant(wallet_micro=100_000_000)
    slow = f"{site.url}{SLOW_PAGE}"

    async def run():
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            # Fill every web slot of the fleet (both replicas), and see them held.
            holders = [
                asyncio.create_task(scrape(client, gw.url, tenant.api_key, slow))
                for gw in (a, b, a)
            ]
            await asyncio.to_thread(
                wait_until,
                lambda: site.hits.count(SLOW_PAGE) == CAP,
                what="three slow fetches under way",
            )
            held = web_slots()
            # Then many more scrapes, and as many chats as the model cap, all at once.
            refused, chats = await asyncio.gather(
                asyncio.gather(
                    *(scrape(client, gw.url, tenant.api_key, f"{site.url}/") for gw in (a, b) * 6)
                ),
                asyncio.gather(*(chat(gw.url, tenant.api_key) for gw in (a, b, a))),
            )
            return held, list(refused), chats, await asyncio.gather(*holders)

    held, refused, chats, holders = asyncio.run(run())

    assert held == CAP
    assert [r.status_code for r in holders] == [200] * CAP
    assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [(429, "LM-3003")] * 12
    assert {r.json()["error"]["message"] for r in refused} == {
        "The fleet in-flight cap of web actions is reached."
    }
    assert {r.headers["retry-after"] for r in refused} == {"1"}
    assert len(chats) == CAP and all(chats)  # every chat served while web was full
    assert site.hits.count("/") == 0  # no refused scrape fetched anything
    assert site.hits.count(SLOW_PAGE) == CAP
    assert web_slots() == 0  # every slot handed back
