"""Web acquisition's internal routes through a real gateway: their own token (the seed's
WEB_FETCH_INTERNAL_TOKEN and its legacy alias WEB_FETCH_TOKEN), which the model routes never
take, and `POST /internal/crawl` with `GET` / `DELETE /internal/jobs/{id}` end to end: the job
queued for the group the body names, fetched by a real Celery worker, read back and cancelled.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from billing.models import Wallet
from tests.support.processes import INTERNAL_TOKEN, ROOT, WEB_TOKEN, child_env
from tests.support.testsite import ARTICLE_TITLE
from tests.support.usage import settled
from tests.support.waits import wait_until
from tests.support.web import PAGE_MICRO, WEB_ENV, start_web_worker, web_profiles, web_stack
from webfetch.models import CrawlJob, CrawlPage

WALLET = 100_000_000
ALIAS_TOKEN = "legacy-web-alias-token-for-tests-0123456789"
MODEL = {"Authorization": f"Bearer {INTERNAL_TOKEN}"}
WEB = {"Authorization": f"Bearer {WEB_TOKEN}"}


@pytest.fixture(scope="module")
def web_gateway(module_gateways):
    return module_gateways(**WEB_ENV)


@pytest.fixture
def stack(transactional_db, web_gateway, stub, site):
    return web_stack(web_gateway, stub, site, web_profiles(stub.url, render=False))


@pytest.fixture
def workers(tmp_path):
    started = []

    def start(name: str = "w0"):
        started.append(start_web_worker(tmp_path, name))

    yield start
    for worker in started:
        worker.stop()


def internal(stack, method: str, path: str, headers: dict, **kwargs) -> httpx.Response:
    return httpx.request(
        method, f"{stack.url}/internal/{path}", headers=headers, timeout=30, **kwargs
    )


def finished(job_id: str) -> CrawlJob:
    return wait_until(
        lambda: (
            CrawlJob.objects.filter(public_id=job_id)
            .exclude(state__in=["queued", "running"])
            .first()
        ),
        timeout_s=60,
        what=f"crawl {job_id} to end",
    )


# ---------------------------------------------------------------- whose token opens what


def test_the_web_token_opens_the_web_routes_and_not_the_model_routes(stack, site):
    tenant = stack.tenant(wallet_micro=WALLET)
    body = {"group": tenant.group_id, "request_id": "ingest-1", "url": f"{site.url}/"}

    scraped = internal(stack, "POST", "scrape", WEB, json=body)
    model_token = internal(stack, "POST", "scrape", MODEL, json=body)
    model_routes = [
        internal(
            stack,
            "POST",
            path,
            WEB,
            json={
                "group": tenant.group_id,
                "request_id": "r-1",
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "Hi"}],
            },
        )
        for path in ("complete", "stream", "decide", "reload")
    ]

    assert scraped.status_code == 200, scraped.text
    assert scraped.json()["request_id"] == "ingest-1"
    assert model_token.status_code == 401
    assert model_token.json()["error"] == {
        "message": "Missing or wrong internal token (web routes take WEB_FETCH_INTERNAL_TOKEN).",
        "type": "authentication_error",
        "code": "LM-1001",
    }
    assert [(r.status_code, r.json()["error"]["code"]) for r in model_routes] == [
        (401, "LM-1001")
    ] * 4
    assert site.hits == ["/"]
    [row] = settled(tenant, 1)  # refusals before the group is read leave no row
    assert (row.endpoint, row.provider_cost_micro) == ("internal.scrape", PAGE_MICRO)


def test_the_model_token_is_refused_on_every_web_route(stack):
    tenant = stack.tenant(wallet_micro=WALLET)
    group = {"group": tenant.group_id, "request_id": "r-2"}

    answers = [
        internal(stack, "POST", "scrape", MODEL, json={**group, "url": "https://example.com/"}),
        internal(stack, "POST", "search", MODEL, json={**group, "query": "q"}),
        internal(stack, "POST", "crawl", MODEL, json={**group, "url": "https://example.com/"}),
        internal(stack, "GET", "jobs/crawl_unknown", MODEL),
        internal(stack, "DELETE", "jobs/crawl_unknown", MODEL),
    ]

    assert [(a.status_code, a.json()["error"]["code"]) for a in answers] == [(401, "LM-1001")] * 5
    assert stack.stub.calls() == []
    assert CrawlJob.objects.count() == 0


def test_the_legacy_alias_is_accepted_beside_the_new_token(
    spawn_gateway, transactional_db, stub, site
):
    gateway = spawn_gateway(**WEB_ENV, WEB_FETCH_TOKEN=ALIAS_TOKEN)
    stack = web_stack(gateway, stub, site, web_profiles(stub.url, render=False))
    tenant = stack.tenant(wallet_micro=WALLET)

    def search(token: str) -> httpx.Response:
        return internal(
            stack,
            "POST",
            "search",
            {"Authorization": f"Bearer {token}"},
            json={"group": tenant.group_id, "request_id": "r-3", "query": "gateways"},
        )

    assert [search(token).status_code for token in (WEB_TOKEN, ALIAS_TOKEN)] == [200, 200]
    assert search(INTERNAL_TOKEN).status_code == 401
    assert (
        internal(stack, "POST", "reload", {"Authorization": f"Bearer {ALIAS_TOKEN}"}).status_code
        == 401
    )


def test_without_a_web_token_the_web_routes_are_off_and_the_model_routes_still_work(
    spawn_gateway, transactional_db, stub, site
):
    gateway = spawn_gateway(**WEB_ENV, WEB_FETCH_INTERNAL_TOKEN="")
    stack = web_stack(gateway, stub, site, web_profiles(stub.url, render=False))
    tenant = stack.tenant(wallet_micro=WALLET)

    refused = internal(
        stack,
        "POST",
        "scrape",
        MODEL,
        json={"group": tenant.group_id, "request_id": "r-4", "url": f"{site.url}/"},
    )

    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == (
        "Internal web routes are off: WEB_FETCH_INTERNAL_TOKEN is not set."
    )
    assert site.hits == []
    assert internal(stack, "POST", "reload", MODEL).status_code == 200


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"WEB_FETCH_INTERNAL_TOKEN": "short"},
            "Malformed setting WEB_FETCH_INTERNAL_TOKEN: it must be at least 32 characters.",
        ),
        (
            {"WEB_FETCH_TOKEN": INTERNAL_TOKEN, "GATEWAY_INTERNAL_TOKEN": INTERNAL_TOKEN},
            "Malformed setting WEB_FETCH_TOKEN: it must differ from GATEWAY_INTERNAL_TOKEN",
        ),
        ({"WEB_FETCH_TOKENS": "x" * 40}, "Unknown setting WEB_FETCH_TOKENS"),
    ],
)
def test_a_web_token_too_short_or_equal_to_the_model_token_stops_the_process(env, message):
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=child_env(DJANGO_SETTINGS_MODULE="config.settings", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert message in result.stderr


# ---------------------------------------------------------------- crawl jobs, internally


def test_an_internal_crawl_is_queued_for_the_named_group_fetched_and_read_back(
    stack, site, workers
):
    tenant = stack.tenant(wallet_micro=WALLET)

    queued = internal(
        stack,
        "POST",
        "crawl",
        WEB,
        json={
            "group": tenant.group_id,
            "request_id": "ingest-crawl-7",
            "url": f"{site.url}/",
            "max_pages": 3,
            "max_depth": 1,
            "formats": ["markdown"],
        },
    )
    assert queued.status_code == 202, queued.text
    job = queued.json()
    assert (job["state"], job["client_request_id"]) == ("queued", "ingest-crawl-7")
    assert (job["limits"]["max_pages"], job["limits"]["max_depth"]) == (3, 1)
    row = CrawlJob.objects.get(public_id=job["id"])
    assert (row.account_id, row.group_id, row.api_key_id) == (
        tenant.account_id,
        tenant.group_id,
        None,  # a trusted service, not a key, asked for it
    )
    workers()
    ended = finished(job["id"])

    first = internal(stack, "GET", f"jobs/{job['id']}", WEB, params={"limit": 2})
    rest = internal(
        stack,
        "GET",
        f"jobs/{job['id']}",
        WEB,
        params={"limit": 2, "after": first.json()["next_after"]},
    )

    assert ended.state == "done", (ended.state, ended.stop_reason)
    assert first.status_code == rest.status_code == 200
    shown = first.json()
    assert (shown["id"], shown["state"], shown["counters"]["pages_fetched"]) == (
        job["id"],
        "done",
        3,
    )
    assert shown["cost_micro"] == 3 * PAGE_MICRO
    pages = shown["pages"] + rest.json()["pages"]
    assert rest.json()["next_after"] is None
    assert [p["url"] for p in pages] == [
        p.url for p in CrawlPage.objects.filter(job=ended).order_by("id")
    ]
    assert pages[0]["url"] == f"{site.url}/"
    assert pages[0]["title"] == f"{ARTICLE_TITLE} | Tollgate test site" and pages[0]["markdown"]
    rows = settled(tenant, 4)  # the POST (202, nothing billed) and three pages
    assert sorted((r.endpoint, r.status, r.provider_cost_micro) for r in rows) == [
        ("internal.crawl", 202, 0),
        *[("web.crawl.page", 200, PAGE_MICRO)] * 3,
    ]
    [post] = [r for r in rows if r.endpoint == "internal.crawl"]
    assert post.client_request_id == "ingest-crawl-7"
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == WALLET - 3 * PAGE_MICRO


def test_an_internal_crawl_is_cancelled_through_the_internal_job_route(stack, site, workers):
    tenant = stack.tenant(wallet_micro=WALLET)
    job = internal(
        stack,
        "POST",
        "crawl",
        WEB,
        json={"group": tenant.group_id, "request_id": "r-5", "url": f"{site.url}/"},
    ).json()

    cancelled = internal(stack, "DELETE", f"jobs/{job['id']}", WEB)
    workers()
    unknown = internal(stack, "GET", "jobs/crawl_no_such_job", WEB)

    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    assert CrawlJob.objects.get(public_id=job["id"]).state == "cancelled"
    assert internal(stack, "GET", f"jobs/{job['id']}", WEB).json()["state"] == "cancelled"
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "LM-2004")
    assert site.hits == []


def test_the_internal_job_route_reads_a_job_a_tenant_queued_and_the_tenant_route_refuses_others(
    stack, site
):
    owner, other = stack.tenant(wallet_micro=WALLET), stack.tenant(wallet_micro=WALLET)
    queued = httpx.post(
        f"{stack.url}/v1/web/crawl",
        json={"url": f"{site.url}/", "max_pages": 2},
        headers={"Authorization": f"Bearer {owner.api_key}"},
        timeout=30,
    )
    job_id = queued.json()["id"]

    trusted = internal(stack, "GET", f"jobs/{job_id}", WEB)
    foreign = httpx.get(
        f"{stack.url}/v1/web/jobs/{job_id}", headers={"Authorization": f"Bearer {other.api_key}"}
    )

    assert queued.status_code == 202, queued.text
    assert (trusted.status_code, trusted.json()["id"]) == (200, job_id)
    assert [(p["url"], p["state"]) for p in trusted.json()["pages"]] == [(f"{site.url}/", "queued")]
    assert foreign.status_code == 404
