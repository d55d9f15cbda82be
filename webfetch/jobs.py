"""A crawl job's life: created with its seed page, claimed by one worker at a time under a
lease, fed page by page, ended once (done, cancelled, budget_exhausted, failed).

Concurrency is the database's: jobs and pages are claimed with `FOR UPDATE SKIP LOCKED`, so
two workers never take the same row; a URL is a job's page once (a unique constraint), so no
page is fetched twice; recording a page locks its job row, so the frontier's bound
(`max_pages` page rows) holds exactly even when several workers feed one job.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Account, ApiKey, Group
from core.config import tollgate
from core.ids import time_ordered_id
from core.tags import clean_tags
from webfetch.frontier import in_scope, normalise, validate_patterns
from webfetch.models import URL_MAX_CHARS, CrawlJob, CrawlPage

if TYPE_CHECKING:
    from webfetch.crawl import PageOutcome

FORMATS = ("text", "markdown", "html")
STORED_CHARS_MAX = 200_000
_LINKS_PER_PAGE_MAX = 5_000  # a page's links considered: bounds the work of one record

State = CrawlJob.State
PageState = CrawlPage.State


def _validated_formats(formats: Iterable[str]) -> list[str]:
    if isinstance(formats, str):
        raise ValueError('formats must be a list, e.g. ["text"]')
    chosen: list[str] = []
    for name in formats:
        if name not in FORMATS:
            raise ValueError(f"formats: {name!r} is not one of {', '.join(FORMATS)}")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise ValueError("formats must name at least one of " + ", ".join(FORMATS))
    return chosen


def create_job(
    *,
    account: Account,
    group: Group,
    api_key: ApiKey | None,
    seed_url: str,
    max_pages: int,
    max_depth: int,
    same_host: bool = True,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    render_js: bool = False,
    formats: Iterable[str] = ("text",),
    respect_robots: bool = True,
    client_request_id: str = "",
    tags: Iterable[str] = (),
) -> CrawlJob:
    """Insert a queued job and its seed page (depth 0); ValueError says what a client got wrong."""
    pages_cap, depth_cap = tollgate().crawl_max_pages, tollgate().crawl_max_depth
    if isinstance(max_pages, bool) or not isinstance(max_pages, int):
        raise ValueError("max_pages must be an integer")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int):
        raise ValueError("max_depth must be an integer")
    if not 1 <= max_pages <= pages_cap:
        raise ValueError(f"max_pages must be between 1 and {pages_cap}, got {max_pages}")
    if not 0 <= max_depth <= depth_cap:
        raise ValueError(f"max_depth must be between 0 and {depth_cap}, got {max_depth}")
    seed = normalise(seed_url) if isinstance(seed_url, str) else None
    if seed is None:
        raise ValueError("seed_url must be an absolute http or https URL without credentials")
    if len(seed) > URL_MAX_CHARS:
        raise ValueError(f"seed_url is longer than {URL_MAX_CHARS} characters")
    if len(client_request_id) > 64:
        raise ValueError("client_request_id is longer than 64 characters")
    # The caller resolved these; a mismatch is a bug upstream, refused before it is stored.
    if group.account_id != account.pk:
        raise ValueError("the group does not belong to the account")
    if api_key is not None and api_key.group_id != group.pk:
        raise ValueError("the API key does not belong to the group")
    with transaction.atomic():
        job = CrawlJob.objects.create(
            account=account,
            group=group,
            api_key=api_key,
            client_request_id=client_request_id,
            tags=list(clean_tags(tags)),
            seed_url=seed,
            max_pages=max_pages,
            max_depth=max_depth,
            same_host=same_host,
            include=validate_patterns(include, name="include"),
            exclude=validate_patterns(exclude, name="exclude"),
            render_js=render_js,
            formats=_validated_formats(formats),
            respect_robots=respect_robots,
        )
        CrawlPage.objects.create(job=job, url=seed, depth=0)
    return job


def claim_job(*, worker: str) -> CrawlJob | None:
    """Take the oldest queued job, or a running one whose worker's lease ran out; None if none.

    A taken-over job's pages left `fetching` by the dead worker go back to queued. Their
    request id stays on the page: the refetch bills under the same id, and the usage log
    stores a request id once, so a page refetched after a crash is not billed twice
    (provided the fetcher bills under `page.request_id`, as `PageFetcher` asks).
    """
    now = timezone.now()
    with transaction.atomic():
        job = (
            CrawlJob.objects.select_for_update(skip_locked=True)
            .filter(Q(state=State.QUEUED) | Q(state=State.RUNNING, lease_until__lt=now))
            .order_by("created_at", "id")
            .first()
        )
        if job is None:
            return None
        job.state = State.RUNNING
        job.worker = worker
        job.lease_until = now + timedelta(seconds=tollgate().crawl_lease_s)
        job.started_at = job.started_at or now
        job.save(update_fields=["state", "worker", "lease_until", "started_at"])
        CrawlPage.objects.filter(job=job, state=PageState.FETCHING).update(state=PageState.QUEUED)
    return job


def renew_lease(job: CrawlJob, *, worker: str) -> bool:
    """Extend the worker's lease; False when the job was taken over or ended (the worker stops)."""
    lease_until = timezone.now() + timedelta(seconds=tollgate().crawl_lease_s)
    renewed = CrawlJob.objects.filter(pk=job.pk, state=State.RUNNING, worker=worker).update(
        lease_until=lease_until
    )
    if renewed:
        job.lease_until = lease_until
    return bool(renewed)


def next_page(job: CrawlJob, *, worker: str) -> CrawlPage | None:
    """Claim the job's next queued page (breadth-first), set it fetching; None when none is left
    or the worker no longer holds the job."""
    with transaction.atomic():
        page = (
            CrawlPage.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(
                job_id=job.pk,
                state=PageState.QUEUED,
                job__state=State.RUNNING,
                job__worker=worker,
            )
            .order_by("depth", "id")
            .first()
        )
        if page is None:
            return None
        page.state = PageState.FETCHING
        # Kept when already set: see claim_job on a refetch after a crash.
        page.request_id = page.request_id or time_ordered_id()
        page.save(update_fields=["state", "request_id"])
    return page


def release_page(page: CrawlPage) -> None:
    """Put a page that was not fetched back in the queue (the fetcher stopped before it)."""
    CrawlPage.objects.filter(pk=page.pk, state=PageState.FETCHING).update(state=PageState.QUEUED)
    page.state = PageState.QUEUED


def _bounded(value: str) -> str:
    return value[:STORED_CHARS_MAX]


def record_page(page: CrawlPage, outcome: PageOutcome) -> None:
    """Store a fetched (or failed, or skipped) page, add it to its job's counters, and queue its
    links that are in scope while the job has fewer than `max_pages` page rows.

    A page no longer `fetching` (recorded already by a worker that took the job over) is left
    as is: its counters were bumped once, by that record.
    """
    with transaction.atomic():
        # The job's row lock serialises records of one job: the frontier count stays exact.
        job = CrawlJob.objects.select_for_update().get(pk=page.job_id)
        locked = CrawlPage.objects.select_for_update().get(pk=page.pk)
        if locked.state != PageState.FETCHING:
            return
        formats = set(job.formats)
        page.state = outcome.state
        page.status = outcome.status
        page.final_url = (outcome.final_url or "")[:URL_MAX_CHARS]
        page.content_type = (outcome.content_type or "")[:200]
        page.title = (outcome.title or "")[:1000]
        page.text = _bounded(outcome.text) if "text" in formats else ""
        page.markdown = _bounded(outcome.markdown) if "markdown" in formats else ""
        page.html = _bounded(outcome.html) if "html" in formats else ""
        page.bytes = outcome.bytes
        page.provider = outcome.provider[:200]
        page.units = outcome.units
        page.cost_micro = outcome.cost_micro
        page.request_id = outcome.request_id
        page.error_code = outcome.error_code[:64]
        page.skip_reason = outcome.skip_reason[:32]
        page.fetched_at = timezone.now()
        page.save()
        counter = {
            PageState.FETCHED: "pages_fetched",
            PageState.FAILED: "pages_failed",
            PageState.SKIPPED: "pages_skipped",
        }[PageState(outcome.state)]
        CrawlJob.objects.filter(pk=job.pk).update(
            **{counter: F(counter) + 1},
            units=F("units") + outcome.units,
            cost_micro=F("cost_micro") + outcome.cost_micro,
            bytes=F("bytes") + outcome.bytes,
        )
        if outcome.state == PageState.FETCHED and outcome.links:
            _queue_links(job, page, outcome.links)


def _queue_links(job: CrawlJob, page: CrawlPage, links: Iterable[str]) -> None:
    depth = page.depth + 1
    if depth > job.max_depth:
        return
    room = job.max_pages - CrawlPage.objects.filter(job=job).count()
    if room <= 0:
        return
    base = page.final_url or page.url
    candidates: dict[str, None] = {}  # in the page's order, once each
    for link in list(links)[:_LINKS_PER_PAGE_MAX]:
        url = normalise(link, base)
        if (
            url
            and len(url) <= URL_MAX_CHARS
            and url not in candidates
            and in_scope(job, url, depth=depth) is None
        ):
            candidates[url] = None
    known = set(CrawlPage.objects.filter(job=job, url__in=candidates).values_list("url", flat=True))
    fresh = [url for url in candidates if url not in known][:room]
    # ignore_conflicts: the unique (job, url) constraint is the backstop for any other writer.
    CrawlPage.objects.bulk_create(
        [CrawlPage(job=job, url=url, depth=depth) for url in fresh], ignore_conflicts=True
    )


def cancel_job(job_or_public_id: CrawlJob | str, *, account: Account) -> CrawlJob:
    """Cancel a queued or running job of the account; a finished job is returned as it is.

    CrawlJob.DoesNotExist when the account has no such job. A worker sees the cancel at its
    next page (its lease renewal fails) and stops; the page it is fetching is still recorded.
    """
    if isinstance(job_or_public_id, CrawlJob):
        public_id = job_or_public_id.public_id
    else:
        public_id = job_or_public_id
    job = CrawlJob.objects.get(public_id=public_id, account=account)
    CrawlJob.objects.filter(pk=job.pk, state__in=CrawlJob.ACTIVE_STATES).update(
        state=State.CANCELLED, stop_reason="cancelled", finished_at=timezone.now(), lease_until=None
    )
    job.refresh_from_db()
    return job


def finish_job(
    job: CrawlJob, *, state: str, stop_reason: str, worker: str | None = None
) -> CrawlJob:
    """End an active job with a final state and why; a job that ended already keeps its ending.

    With `worker`, only while that worker holds the job (one taken over is not its to end).
    """
    if state in CrawlJob.ACTIVE_STATES or state not in State.values:
        raise ValueError(f"{state} is not a final state")
    active = CrawlJob.objects.filter(pk=job.pk, state__in=CrawlJob.ACTIVE_STATES)
    if worker is not None:
        active = active.filter(worker=worker)
    active.update(
        state=state, stop_reason=stop_reason[:64], finished_at=timezone.now(), lease_until=None
    )
    job.refresh_from_db()
    return job
