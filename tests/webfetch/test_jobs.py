"""The job's life on real PostgreSQL: creation rules, claims under concurrency (each thread
its own connection), leases, the page queue and what recording a page adds."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from webfetch.crawl import PageOutcome
from webfetch.jobs import (
    cancel_job,
    claim_job,
    create_job,
    finish_job,
    next_page,
    record_page,
    release_page,
    renew_lease,
)
from webfetch.models import CrawlJob, CrawlPage


def in_threads(count: int, work: Callable[[int], list]) -> list[list]:
    """Run `work(index)` in `count` threads started together; each thread has its own
    database connection (Django's are per thread), closed when it ends."""
    barrier = threading.Barrier(count)
    results: list[list] = [[] for _ in range(count)]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = work(index)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)
    return results


# -- creation ---------------------------------------------------------------------------


def test_create_job_inserts_a_queued_job_and_its_seed_page(new_job, tenant):
    job = new_job(seed_url="HTTP://Site.Test#x", max_pages=7, max_depth=2, formats=["markdown"])
    assert job.public_id.startswith("crawl_") and len(job.public_id) == 6 + 24
    int(job.public_id[6:], 16)  # hex
    assert job.state == "queued" and job.stop_reason == ""
    assert job.seed_url == "http://site.test/"
    assert (job.max_pages, job.max_depth, job.formats) == (7, 2, ["markdown"])
    assert (job.account_id, job.group_id, job.api_key_id) == (
        tenant.account.pk,
        tenant.group.pk,
        tenant.api_key.pk,
    )
    pages = list(CrawlPage.objects.filter(job=job).values_list("url", "depth", "state"))
    assert pages == [("http://site.test/", 0, "queued")]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_pages": 0}, "max_pages must be between 1 and 200, got 0"),
        ({"max_pages": 201}, "max_pages must be between 1 and 200, got 201"),
        ({"max_pages": "5"}, "max_pages must be an integer"),
        ({"max_depth": -1}, "max_depth must be between 0 and 5, got -1"),
        ({"max_depth": 6}, "max_depth must be between 0 and 5, got 6"),
        ({"seed_url": "ftp://site.test/"}, "seed_url must be an absolute http or https URL"),
        ({"seed_url": "/relative"}, "seed_url must be an absolute http or https URL"),
        ({"seed_url": "http://site.test/" + "a" * 2048}, "seed_url is longer than 2048"),
        ({"include": ["ok"] * 21}, "include takes at most 20 patterns, got 21"),
        ({"exclude": ["a" * 201]}, "exclude[0] is longer than 200 characters"),
        ({"exclude": ["fine", "(unclosed"]}, "exclude[1] is not a valid regular expression"),
        ({"include": "/docs/"}, "include must be a list of regular expressions"),
        ({"formats": ["text", "pdf"]}, "formats: 'pdf' is not one of text, markdown, html"),
        ({"formats": []}, "formats must name at least one of"),
        ({"client_request_id": "x" * 65}, "client_request_id is longer than 64 characters"),
    ],
)
def test_create_job_refuses_what_it_cannot_run_and_stores_nothing(new_job, fields, message):
    with pytest.raises(ValueError) as refused:
        new_job(**fields)
    assert str(refused.value).startswith(message)
    assert CrawlJob.objects.count() == 0 and CrawlPage.objects.count() == 0


def test_create_job_takes_the_limits_at_their_bounds_and_the_patterns_given(new_job):
    job = new_job(max_pages=200, max_depth=0, include=["a"] * 20, exclude=["b" * 200])
    assert (job.max_pages, job.max_depth, job.include, job.exclude) == (
        200,
        0,
        ["a"] * 20,
        ["b" * 200],
    )
    job = new_job(max_pages=1, max_depth=5, formats=["html", "text", "html"])
    assert (job.max_pages, job.max_depth, job.formats) == (1, 5, ["html", "text"])


def test_create_job_refuses_a_group_of_another_account(new_job, tenant):
    from tests.webfetch.conftest import make_crawl_tenant

    other = make_crawl_tenant()
    with pytest.raises(ValueError, match="the group does not belong to the account"):
        create_job(
            account=tenant.account,
            group=other.group,
            api_key=None,
            seed_url="http://site.test/",
            max_pages=1,
            max_depth=0,
        )
    with pytest.raises(ValueError, match="the API key does not belong to the group"):
        create_job(
            account=tenant.account,
            group=tenant.group,
            api_key=other.api_key,
            seed_url="http://site.test/",
            max_pages=1,
            max_depth=0,
        )


# -- claims -----------------------------------------------------------------------------


def test_claim_job_takes_the_oldest_queued_job_and_leases_it(new_job, settings):
    settings.TOLLGATE = {**settings.TOLLGATE, "CRAWL_LEASE_S": 90}
    first, second = new_job(), new_job()
    before = timezone.now()
    claimed = claim_job(worker="w1")
    assert claimed.pk == first.pk
    assert (claimed.state, claimed.worker) == ("running", "w1")
    assert before + timedelta(seconds=90) <= claimed.lease_until
    assert claimed.lease_until <= timezone.now() + timedelta(seconds=90)
    assert claimed.started_at >= before
    assert claim_job(worker="w2").pk == second.pk
    assert claim_job(worker="w3") is None  # both are held, their leases running


def test_claim_job_skips_a_job_locked_by_another_transaction(transactional_db, new_job):
    first, second = new_job(), new_job()
    holder_ready, release = threading.Event(), threading.Event()

    def hold_first(_index: int) -> list:
        with transaction.atomic():
            CrawlJob.objects.select_for_update().get(pk=first.pk)
            holder_ready.set()
            release.wait(timeout=30)
        return []

    holder = threading.Thread(target=lambda: (hold_first(0), connection.close()))
    holder.start()
    try:
        assert holder_ready.wait(timeout=10)
        claimed = claim_job(worker="w")  # does not wait for the lock: skips the row
        assert claimed.pk == second.pk
    finally:
        release.set()
        holder.join(timeout=30)
    assert claim_job(worker="w").pk == first.pk


def test_two_connections_claiming_at_once_take_each_job_exactly_once(transactional_db, new_job):
    jobs = [new_job() for _ in range(12)]

    def claim_all(index: int) -> list:
        taken = []
        while (job := claim_job(worker=f"worker-{index}")) is not None:
            taken.append(job.pk)
        return taken

    first, second = in_threads(2, claim_all)
    assert set(first).isdisjoint(second)
    assert sorted(first + second) == sorted(job.pk for job in jobs)
    assert len(first + second) == 12
    stored = dict(CrawlJob.objects.values_list("pk", "worker"))
    assert all(stored[pk] == "worker-0" for pk in first)
    assert all(stored[pk] == "worker-1" for pk in second)


def test_an_expired_lease_is_taken_over_and_the_dead_workers_page_requeued(new_job):
    new_job()
    job = claim_job(worker="dead")
    page = next_page(job, worker="dead")
    assert page.state == "fetching" and len(page.request_id) == 32
    assert claim_job(worker="heir") is None  # the lease still runs
    CrawlJob.objects.filter(pk=job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

    taken = claim_job(worker="heir")
    assert (taken.pk, taken.worker, taken.state) == (job.pk, "heir", "running")
    assert taken.started_at == job.started_at  # started once
    assert renew_lease(job, worker="dead") is False
    assert next_page(job, worker="dead") is None
    again = next_page(taken, worker="heir")
    # The same page, with the same request id: a refetch bills under the id it had.
    assert (again.pk, again.state, again.request_id) == (page.pk, "fetching", page.request_id)


def test_renew_lease_extends_the_holders_lease_only(new_job, settings):
    new_job()
    job = claim_job(worker="w")
    CrawlJob.objects.filter(pk=job.pk).update(lease_until=timezone.now())
    settings.TOLLGATE = {**settings.TOLLGATE, "CRAWL_LEASE_S": 300}
    assert renew_lease(job, worker="w") is True
    stored = CrawlJob.objects.get(pk=job.pk)
    assert stored.lease_until > timezone.now() + timedelta(seconds=290)
    assert renew_lease(job, worker="someone-else") is False
    cancel_job(job, account=job.account)
    assert renew_lease(job, worker="w") is False


# -- the page queue ---------------------------------------------------------------------


def _queue_pages(job: CrawlJob, urls_by_depth: list[tuple[str, int]]) -> list[CrawlPage]:
    return CrawlPage.objects.bulk_create(
        [CrawlPage(job=job, url=url, depth=depth) for url, depth in urls_by_depth]
    )


def test_next_page_goes_breadth_first_then_oldest_first(new_job):
    new_job()
    job = claim_job(worker="w")
    _queue_pages(job, [("http://site.test/d2", 2), ("http://site.test/d1a", 1)])
    _queue_pages(job, [("http://site.test/d1b", 1)])
    order = []
    while (page := next_page(job, worker="w")) is not None:
        order.append(page.url)
    assert order == [
        "http://site.test/",
        "http://site.test/d1a",
        "http://site.test/d1b",
        "http://site.test/d2",
    ]
    assert set(CrawlPage.objects.filter(job=job).values_list("state", flat=True)) == {"fetching"}


def test_next_page_skips_a_page_locked_by_another_transaction(transactional_db, new_job):
    new_job()
    job = claim_job(worker="w")
    seed = CrawlPage.objects.get(job=job)
    (second,) = _queue_pages(job, [("http://site.test/2", 1)])
    holder_ready, release = threading.Event(), threading.Event()

    def hold_seed() -> None:
        try:
            with transaction.atomic():
                CrawlPage.objects.select_for_update().get(pk=seed.pk)
                holder_ready.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_seed)
    holder.start()
    try:
        assert holder_ready.wait(timeout=10)
        assert next_page(job, worker="w").pk == second.pk
    finally:
        release.set()
        holder.join(timeout=30)
    assert next_page(job, worker="w").pk == seed.pk


def test_two_connections_taking_pages_never_get_the_same_page(transactional_db, new_job):
    new_job()
    job = claim_job(worker="w")
    _queue_pages(job, [(f"http://site.test/p{i}", 1 + i % 3) for i in range(59)])

    def take_all(_index: int) -> list:
        taken = []
        while (page := next_page(job, worker="w")) is not None:
            taken.append(page.pk)
        return taken

    first, second = in_threads(2, take_all)
    assert set(first).isdisjoint(second)
    assert len(first) + len(second) == 60
    assert sorted(first + second) == sorted(
        CrawlPage.objects.filter(job=job).values_list("pk", flat=True)
    )


def test_next_page_gives_nothing_to_a_worker_not_holding_the_job(new_job):
    new_job()
    job = claim_job(worker="w")
    assert next_page(job, worker="other") is None
    assert CrawlPage.objects.get(job=job).state == "queued"


def test_release_page_puts_it_back_in_the_queue_with_its_request_id(new_job):
    new_job()
    job = claim_job(worker="w")
    page = next_page(job, worker="w")
    release_page(page)
    stored = CrawlPage.objects.get(pk=page.pk)
    assert (stored.state, stored.request_id) == ("queued", page.request_id)


# -- recording --------------------------------------------------------------------------


def _fetched(**fields) -> PageOutcome:
    fields.setdefault("status", 200)
    fields.setdefault("units", 1)
    fields.setdefault("cost_micro", 1_500)
    fields.setdefault("bytes", 1_000)
    return PageOutcome(state="fetched", **fields)


def _urls(job: CrawlJob) -> list[tuple[str, int]]:
    return list(CrawlPage.objects.filter(job=job).order_by("id").values_list("url", "depth"))


def test_record_page_queues_only_the_links_in_scope(new_job):
    new_job(seed_url="http://site.test/docs/", max_depth=1, exclude=[r"\.pdf$"])
    job = claim_job(worker="w")
    seed = next_page(job, worker="w")
    links = (
        "intro",  # relative to the page
        "/docs/intro#part-2",  # the same page again
        "HTTP://SITE.TEST:80/docs/guide",
        "http://other.test/docs/x",
        "/docs/manual.pdf",
        "mailto:docs@site.test",
        "javascript:void(0)",
        "http://site.test/" + "a" * 2100,
        "/",
    )
    record_page(seed, _fetched(links=links, final_url="http://site.test/docs/"))
    assert _urls(job) == [
        ("http://site.test/docs/", 0),
        ("http://site.test/docs/intro", 1),
        ("http://site.test/docs/guide", 1),
        ("http://site.test/", 1),
    ]
    # At max_depth the page's links go nowhere.
    deep = next_page(job, worker="w")
    record_page(deep, _fetched(links=("/docs/deeper",)))
    assert len(_urls(job)) == 4


def test_record_page_resolves_links_against_the_final_url(new_job):
    new_job(same_host=False)
    job = claim_job(worker="w")
    seed = next_page(job, worker="w")
    record_page(seed, _fetched(final_url="http://moved.test/new/", links=("page",)))
    assert _urls(job)[1] == ("http://moved.test/new/page", 1)


def test_record_page_applies_includes(new_job):
    new_job(include=[r"/blog/\d+$", r"/about$"])
    job = claim_job(worker="w")
    seed = next_page(job, worker="w")
    links = ("/blog/1", "/blog/draft", "/about", "/about/team", "/blog/22")
    record_page(seed, _fetched(links=links))
    assert [url for url, _ in _urls(job)[1:]] == [
        "http://site.test/blog/1",
        "http://site.test/about",
        "http://site.test/blog/22",
    ]


def test_the_frontier_never_holds_more_than_max_pages_rows(new_job):
    new_job(max_pages=4)
    job = claim_job(worker="w")
    seed = next_page(job, worker="w")
    record_page(seed, _fetched(links=("/a", "/a", "/b", "/", "/c", "/d", "/e")))
    # The duplicates and the seed take no room: exactly three new rows of seven links.
    assert [url for url, _ in _urls(job)] == [
        "http://site.test/",
        "http://site.test/a",
        "http://site.test/b",
        "http://site.test/c",
    ]
    page = next_page(job, worker="w")
    record_page(page, _fetched(links=("/f", "/g")))
    assert CrawlPage.objects.filter(job=job).count() == 4


def test_record_page_sums_counters_and_stores_only_the_formats_asked(new_job):
    new_job(formats=["markdown"])
    job = claim_job(worker="w")
    seed = next_page(job, worker="w")
    record_page(
        seed,
        _fetched(
            units=2,
            cost_micro=3_250,
            bytes=4_096,
            title="Home",
            text="plain",
            markdown="# Home\n" + "m" * 300_000,
            html="<h1>Home</h1>",
            provider="direct",
            request_id=seed.request_id,
            content_type="text/html",
            links=("/a", "/b", "/c"),
        ),
    )
    for _ in range(3):
        page = next_page(job, worker="w")
        if page.url.endswith("/a"):
            record_page(page, PageOutcome(state="failed", status=503, error_code="upstream_5xx"))
        elif page.url.endswith("/b"):
            record_page(page, PageOutcome(state="skipped", skip_reason="not_html", bytes=10))
        else:
            record_page(page, _fetched(units=1, cost_micro=1_000, bytes=100, links=("/a",)))
    job.refresh_from_db()
    assert (job.pages_fetched, job.pages_failed, job.pages_skipped) == (2, 1, 1)
    assert (job.units, job.cost_micro, job.bytes) == (3, 4_250, 4_206)
    stored = CrawlPage.objects.get(pk=seed.pk)
    assert (stored.state, stored.status, stored.title, stored.provider) == (
        "fetched",
        200,
        "Home",
        "direct",
    )
    assert (stored.text, stored.html) == ("", "")
    assert stored.markdown == ("# Home\n" + "m" * 300_000)[:200_000]
    assert (stored.units, stored.cost_micro, stored.bytes) == (2, 3_250, 4_096)
    assert stored.request_id == seed.request_id and stored.fetched_at is not None
    failed = CrawlPage.objects.get(job=job, url="http://site.test/a")
    assert (failed.state, failed.status, failed.error_code) == ("failed", 503, "upstream_5xx")
    skipped = CrawlPage.objects.get(job=job, url="http://site.test/b")
    assert (skipped.state, skipped.skip_reason) == ("skipped", "not_html")


def test_a_page_recorded_already_is_not_counted_again(new_job):
    new_job()
    job = claim_job(worker="w")
    page = next_page(job, worker="w")
    record_page(page, _fetched(links=("/a",)))
    record_page(page, _fetched(links=("/b",)))  # e.g. a worker that lost its lease, late
    job.refresh_from_db()
    assert (job.pages_fetched, job.units, job.cost_micro) == (1, 1, 1_500)
    assert [url for url, _ in _urls(job)] == ["http://site.test/", "http://site.test/a"]


# -- endings ----------------------------------------------------------------------------


def test_cancel_job_ends_an_active_job_and_leaves_a_finished_one(new_job, tenant):
    queued = new_job()
    cancelled = cancel_job(queued.public_id, account=tenant.account)
    assert (cancelled.state, cancelled.stop_reason) == ("cancelled", "cancelled")
    assert cancelled.finished_at is not None and cancelled.lease_until is None

    new_job()
    running = claim_job(worker="w")
    assert cancel_job(running, account=tenant.account).state == "cancelled"

    new_job()
    done = finish_job(claim_job(worker="w"), state="done", stop_reason="frontier empty")
    again = cancel_job(done.public_id, account=tenant.account)
    assert (again.state, again.stop_reason, again.finished_at) == (
        "done",
        "frontier empty",
        done.finished_at,
    )


def test_cancel_job_does_not_find_another_accounts_job(new_job):
    from tests.webfetch.conftest import make_crawl_tenant

    job = new_job()
    with pytest.raises(CrawlJob.DoesNotExist):
        cancel_job(job.public_id, account=make_crawl_tenant().account)
    assert CrawlJob.objects.get(pk=job.pk).state == "queued"


def test_finish_job_keeps_the_first_ending_and_refuses_active_states(new_job):
    new_job()
    job = claim_job(worker="w")
    with pytest.raises(ValueError, match="running is not a final state"):
        finish_job(job, state="running", stop_reason="x")
    assert finish_job(job, state="done", stop_reason="x", worker="not-the-holder").state == (
        "running"
    )
    ended = finish_job(job, state="budget_exhausted", stop_reason="wallet cannot cover")
    assert (ended.state, ended.stop_reason) == ("budget_exhausted", "wallet cannot cover")
    assert finish_job(job, state="failed", stop_reason="late").state == "budget_exhausted"
