"""The jobs route's reads: scoped to the account, keyset pages, and the JSON they become."""

from __future__ import annotations

from webfetch.crawl import PageOutcome
from webfetch.jobs import claim_job, next_page, record_page
from webfetch.models import CrawlPage
from webfetch.selectors import job_as_json, job_for_account, job_pages, page_as_json


def test_job_for_account_finds_only_the_accounts_own_job(new_job, tenant):
    from tests.webfetch.conftest import make_crawl_tenant

    job = new_job()
    assert job_for_account(job.public_id, tenant.account.pk).pk == job.pk
    assert job_for_account(job.public_id, make_crawl_tenant().account.pk) is None
    assert job_for_account("crawl_" + "0" * 24, tenant.account.pk) is None


def test_job_pages_walk_every_page_once_by_cursor(new_job):
    job = new_job()
    CrawlPage.objects.bulk_create(
        [CrawlPage(job=job, url=f"http://site.test/{i}", depth=1) for i in range(11)]
    )
    other = new_job()  # its pages never show in the first job's
    walked, after_id, calls = [], None, 0
    while batch := job_pages(job, after_id=after_id, limit=5):
        walked += [page.url for page in batch]
        after_id, calls = batch[-1].pk, calls + 1
    assert calls == 3
    assert walked == ["http://site.test/"] + [f"http://site.test/{i}" for i in range(11)]
    assert [page.url for page in job_pages(other, after_id=None, limit=5)] == ["http://site.test/"]
    assert len(job_pages(job, after_id=None, limit=10_000)) == 12  # at most 100 a call
    assert len(job_pages(job, after_id=None, limit=0)) == 1


def test_job_and_page_json_carry_limits_counters_and_the_formats_asked(new_job):
    new_job(max_pages=9, max_depth=2, include=["/a"], formats=["text", "html"])
    job = claim_job(worker="w")
    page = next_page(job, worker="w")
    record_page(
        page,
        PageOutcome(
            state="fetched",
            status=200,
            final_url="http://site.test/",
            content_type="text/html",
            title="Home",
            text="home",
            markdown="# home",
            html="<p>home</p>",
            bytes=1_234,
            provider="direct",
            units=1,
            cost_micro=2_000,
            request_id=page.request_id,
        ),
    )
    job.refresh_from_db()
    body = job_as_json(job)
    assert body == {
        "id": job.public_id,
        "state": "running",
        "stop_reason": None,
        "seed_url": "http://site.test/",
        "client_request_id": None,
        "limits": {
            "max_pages": 9,
            "max_depth": 2,
            "same_host": True,
            "include": ["/a"],
            "exclude": [],
            "render_js": False,
            "formats": ["text", "html"],
            "respect_robots": True,
        },
        "counters": {"pages_fetched": 1, "pages_failed": 0, "pages_skipped": 0, "bytes": 1_234},
        "units": 1,
        "cost_micro": 2_000,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat(),
        "finished_at": None,
    }
    stored = CrawlPage.objects.get(pk=page.pk)
    assert page_as_json(stored, ["html"]) == {
        "id": stored.pk,
        "url": "http://site.test/",
        "final_url": "http://site.test/",
        "depth": 0,
        "state": "fetched",
        "skip_reason": None,
        "error_code": None,
        "status": 200,
        "content_type": "text/html",
        "title": "Home",
        "bytes": 1_234,
        "provider": "direct",
        "units": 1,
        "cost_micro": 2_000,
        "html": "<p>home</p>",
    }
    both = page_as_json(stored, job.formats)
    assert (both["text"], both["html"], "markdown" in both) == ("home", "<p>home</p>", False)
