"""Crawl jobs through real processes: the gateway queues them, two real Celery workers claim
them (SELECT ... FOR UPDATE SKIP LOCKED) and fetch their pages from the local test site,
each page billed like a scrape; money exact to the micro-USD."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from django.utils import timezone

from accounts.models import Group
from billing.models import Wallet
from tests.support.testsite import ARTICLE_TITLE
from tests.support.usage import settled
from tests.support.waits import wait_until
from tests.support.web import (
    PAGE_MICRO,
    WEB_ENV,
    start_web_worker,
    web,
    web_profiles,
    web_stack,
)
from webfetch.models import CrawlJob, CrawlPage

WALLET = 100_000_000


@pytest.fixture(scope="module")
def crawl_gateway(module_gateways):
    return module_gateways(**WEB_ENV)


@pytest.fixture
def crawls(transactional_db, crawl_gateway, stub, site):
    return web_stack(crawl_gateway, stub, site, web_profiles(stub.url, render=False, search=False))


@pytest.fixture
def workers(tmp_path):
    started = []

    def start(count: int = 2, **env: str):
        for index in range(count):
            started.append(start_web_worker(tmp_path, f"w{index}-{len(started)}", **env))
        return started

    yield start
    for worker in started:
        worker.stop()


def crawl(stack, tenant, url, *, headers: dict | None = None, **body) -> dict:
    response = web(stack.url, tenant.api_key, "crawl", {"url": url, **body}, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


def job_route(stack, tenant, job_id, **params) -> httpx.Response:
    return httpx.get(
        f"{stack.url}/v1/web/jobs/{job_id}",
        params=params,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )


def finished(job_id: str, timeout_s: float = 60) -> CrawlJob:
    return wait_until(
        lambda: (
            CrawlJob.objects.filter(public_id=job_id)
            .exclude(state__in=["queued", "running"])
            .first()
        ),
        timeout_s=timeout_s,
        what=f"crawl {job_id} to end",
    )


def test_two_workers_share_the_jobs_and_no_page_is_fetched_twice(crawls, site, workers):
    tenant = crawls.tenant(wallet_micro=WALLET)
    seeds = ["/a", "/b", "/c"]
    jobs = [
        crawl(
            crawls,
            tenant,
            f"{site.url}{seed}",
            max_pages=3,
            max_depth=2,
            include=[f"^{site.url}{seed}"],
            respect_robots=False,
            headers={"X-Tollgate-Tags": f"Crawl, seed:{seed.strip('/')}"},
        )
        for seed in seeds
    ]
    assert [j["state"] for j in jobs] == ["queued"] * 3
    workers(2, TOLLGATE_CRAWL_HOST_DELAY_MS="300")

    ended = [finished(j["id"]) for j in jobs]

    assert [j.state for j in ended] == ["done"] * 3
    hits = Counter(site.hits)
    # robots.txt once per job: the profile obeys it whatever the job says (its setting)
    assert hits.pop("/robots.txt") == 3
    assert all(count == 1 for count in hits.values()), hits  # no page fetched twice
    fetched = CrawlPage.objects.filter(job__in=ended, state="fetched")
    assert sorted(p.url for p in fetched) == sorted(f"{site.url}{path}" for path in hits)
    assert len({j.worker for j in ended}) == 2  # both workers took jobs, each job one worker
    total_pages = sum(j.pages_fetched for j in ended)
    every = settled(tenant, total_pages + 3)
    queued = [r for r in every if r.endpoint == "web.crawl"]  # the three POSTs, 202, no cost
    assert [(r.status, r.provider_cost_micro, r.web_pages) for r in queued] == [(202, 0, 0)] * 3
    rows = [r for r in every if r.endpoint != "web.crawl"]
    assert sorted(r.request_id for r in rows) == sorted(p.request_id for p in fetched)
    assert {r.endpoint for r in rows} == {"web.crawl.page"}
    assert sorted(r.client_request_id for r in rows) == sorted(p.job.public_id for p in fetched)
    assert sum(r.provider_cost_micro for r in rows) == total_pages * PAGE_MICRO
    # Each page carries its crawl request's tags (kept on the job), as the request's row does.
    seed_of = {j.public_id: seed.strip("/") for j, seed in zip(ended, seeds, strict=True)}
    assert sorted(tuple(r.tags) for r in queued) == [("crawl", f"seed:{s}") for s in "abc"]
    assert all(tuple(r.tags) == ("crawl", f"seed:{seed_of[r.client_request_id]}") for r in rows)
    assert [j.cost_micro for j in ended] == [j.pages_fetched * PAGE_MICRO for j in ended]
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == (
        WALLET - total_pages * PAGE_MICRO
    )


def test_pages_are_read_back_a_page_at_a_time_and_another_account_gets_404(crawls, site, workers):
    tenant = crawls.tenant(wallet_micro=WALLET)
    job = crawl(crawls, tenant, f"{site.url}/", max_pages=5, max_depth=1, formats=["markdown"])
    workers(1)
    ended = finished(job["id"])

    seen, after = [], None
    while True:
        params = {"limit": 2, **({"after": after} if after is not None else {})}
        page = job_route(crawls, tenant, job["id"], **params).json()
        seen += page["pages"]
        after = page["next_after"]
        if after is None:
            break
    assert page["state"] == "done"
    assert [p["url"] for p in seen] == [
        p.url for p in CrawlPage.objects.filter(job=ended).order_by("id")
    ]
    assert len(seen) == 5
    assert seen[0]["url"] == f"{site.url}/"
    assert seen[0]["title"] == f"{ARTICLE_TITLE} | Tollgate test site" and seen[0]["markdown"]
    other = crawls.tenant(wallet_micro=WALLET)
    foreign = job_route(crawls, other, job["id"])
    assert foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "LM-2004"
    assert (
        httpx.delete(
            f"{crawls.url}/v1/web/jobs/{job['id']}",
            headers={"Authorization": f"Bearer {other.api_key}"},
        ).status_code
        == 404
    )


def test_the_daily_unit_budget_stops_a_crawl_with_a_clear_state(crawls, site, workers):
    tenant = crawls.tenant(wallet_micro=WALLET)
    Group.objects.filter(pk=tenant.group_id).update(web_units_per_day=2)
    crawls.gateway.reload()
    job = crawl(crawls, tenant, f"{site.url}/", max_pages=6, max_depth=2)
    workers(1)

    ended = finished(job["id"])

    assert (ended.state, ended.stop_reason) == ("budget_exhausted", "daily unit budget exhausted")
    assert ended.pages_fetched == 2
    shown = job_route(crawls, tenant, job["id"]).json()
    assert (shown["state"], shown["stop_reason"]) == (
        "budget_exhausted",
        "daily unit budget exhausted",
    )
    rows = settled(tenant, 4)  # the POST, two pages, and the page the budget refused
    assert sorted((r.endpoint, r.provider_cost_micro, r.error_code) for r in rows) == [
        ("web.crawl", 0, ""),
        ("web.crawl.page", 0, "LM-3004"),
        ("web.crawl.page", PAGE_MICRO, ""),
        ("web.crawl.page", PAGE_MICRO, ""),
    ]


def test_a_queued_job_cancelled_fetches_nothing(crawls, site, workers):
    tenant = crawls.tenant(wallet_micro=WALLET)
    job = crawl(crawls, tenant, f"{site.url}/", max_pages=5)

    cancelled = httpx.delete(
        f"{crawls.url}/v1/web/jobs/{job['id']}",
        headers={"Authorization": f"Bearer {tenant.api_key}"},
    )
    workers(1)

    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    job_row = CrawlJob.objects.get(public_id=job["id"])
    assert job_row.state == "cancelled"
    assert site.hits == []


def test_robots_txt_is_obeyed_by_default(crawls, site, workers):
    tenant = crawls.tenant(wallet_micro=WALLET)
    job = crawl(crawls, tenant, f"{site.url}/private/x", max_pages=2, max_depth=0)
    workers(1)

    ended = finished(job["id"])

    [page] = CrawlPage.objects.filter(job=ended)
    assert (page.state, page.skip_reason) == ("skipped", "robots")
    assert "/private/x" not in site.hits
    assert ended.cost_micro == 0


def test_a_worker_killed_mid_job_is_taken_over_and_every_fetch_is_billed_once(
    transactional_db, spawn_gateway, stub, site, workers
):
    import signal

    from gateway.tasks import run_crawls

    # Its own gateway: a dead worker's journaled rows are claimed after 1 s, not 15.
    gateway = spawn_gateway(**WEB_ENV, TOLLGATE_USAGE_CLAIM_IDLE_MS="1000")
    stack = web_stack(gateway, stub, site, web_profiles(stub.url, render=False, search=False))
    tenant = stack.tenant(wallet_micro=WALLET)
    job = crawl(stack, tenant, f"{site.url}/", max_pages=6, max_depth=2)
    lease = {"TOLLGATE_CRAWL_LEASE_S": "2", "TOLLGATE_CRAWL_HOST_DELAY_MS": "1000"}
    [first] = workers(1, **lease)
    wait_until(
        lambda: CrawlJob.objects.get(public_id=job["id"]).pages_fetched >= 2,
        timeout_s=30,
        what="two pages",
    )
    first.proc.send_signal(signal.SIGKILL)  # in its politeness wait: between two pages
    first.proc.wait(10)
    taken = CrawlJob.objects.get(public_id=job["id"])
    assert taken.state == "running"
    wait_until(
        lambda: CrawlJob.objects.get(public_id=job["id"]).lease_until < timezone.now(),
        timeout_s=10,
        what="the dead worker's lease to lapse",
    )
    workers(1, **lease)
    run_crawls.delay()  # what beat does: a worker looks for jobs to take over

    ended = finished(job["id"])

    # max_pages bounds the job's page rows: robots.txt's /private/x is one of them, skipped.
    assert (ended.state, ended.pages_fetched + ended.pages_skipped) == ("done", 6)
    assert set(
        CrawlPage.objects.filter(job=ended, state="skipped").values_list("skip_reason", flat=True)
    ) <= {"robots"}
    assert ended.worker != taken.worker
    page_hits = [h for h in site.hits if h != "/robots.txt"]
    every = settled(tenant, 1 + len(page_hits))
    pages = [r for r in every if r.endpoint == "web.crawl.page"]
    # Every fetch that happened is on the books once, the dead worker's included.
    assert len(pages) == len(page_hits)
    assert sum(r.provider_cost_micro for r in pages) == len(page_hits) * PAGE_MICRO
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == (
        WALLET - len(page_hits) * PAGE_MICRO
    )
