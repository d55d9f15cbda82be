"""Crawl jobs and their pages: the job's limits and counters, one row per URL it found."""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Account, ApiKey, Group

URL_MAX_CHARS = 2048


def new_public_id() -> str:
    return "crawl_" + secrets.token_hex(12)


class CrawlJob(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        BUDGET_EXHAUSTED = "budget_exhausted"
        FAILED = "failed"

    public_id = models.CharField(max_length=30, unique=True, default=new_public_id, editable=False)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="crawl_jobs")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="crawl_jobs")
    # Internal callers have no key; a revoked-then-deleted key leaves its jobs' history.
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="crawl_jobs"
    )
    client_request_id = models.CharField(max_length=64, blank=True)
    # The crawl request's tags (its own, then its key's and group's defaults): each page's
    # usage row and tag budgets carry them (core/tags.py).
    tags = models.JSONField(default=list, db_default=[], blank=True)
    seed_url = models.CharField(max_length=URL_MAX_CHARS)
    max_pages = models.PositiveIntegerField()
    max_depth = models.PositiveIntegerField()
    same_host = models.BooleanField(default=True)
    include = models.JSONField(default=list, blank=True)
    exclude = models.JSONField(default=list, blank=True)
    render_js = models.BooleanField(default=False)
    formats = models.JSONField(default=list)
    respect_robots = models.BooleanField(default=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    stop_reason = models.CharField(max_length=64, blank=True)
    pages_fetched = models.PositiveIntegerField(default=0)
    pages_failed = models.PositiveIntegerField(default=0)
    pages_skipped = models.PositiveIntegerField(default=0)
    units = models.PositiveIntegerField(default=0)
    cost_micro = models.BigIntegerField(default=0)
    bytes = models.BigIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    ACTIVE_STATES = (State.QUEUED, State.RUNNING)

    class Meta:
        indexes = [
            # The claim: the oldest queued job, or a running one whose lease ran out.
            models.Index(
                fields=["created_at", "id"],
                name="crawljob_claim",
                condition=Q(state__in=["queued", "running"]),
            ),
            models.Index(fields=["account", "-created_at"], name="crawljob_account_recent"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(max_pages__gte=1), name="crawljob_max_pages_min"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.state})"

    @property
    def is_finished(self) -> bool:
        return self.state not in self.ACTIVE_STATES


class CrawlPage(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        FETCHING = "fetching"
        FETCHED = "fetched"
        FAILED = "failed"
        SKIPPED = "skipped"

    job = models.ForeignKey(CrawlJob, on_delete=models.CASCADE, related_name="pages")
    url = models.CharField(max_length=URL_MAX_CHARS)
    depth = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    skip_reason = models.CharField(max_length=32, blank=True)
    status = models.PositiveIntegerField(null=True, blank=True)
    final_url = models.CharField(max_length=URL_MAX_CHARS, blank=True)
    content_type = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=1000, blank=True)
    text = models.TextField(blank=True)
    markdown = models.TextField(blank=True)
    html = models.TextField(blank=True)
    bytes = models.BigIntegerField(default=0)
    provider = models.CharField(max_length=200, blank=True)
    units = models.PositiveIntegerField(default=0)
    cost_micro = models.BigIntegerField(default=0)
    # Minted when the page is first claimed and kept across re-claims: the fetcher bills under
    # it, so a refetch after a crash repeats a request id the usage log stores only once.
    request_id = models.CharField(max_length=64, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    fetched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # A URL is a job's page once: no page is fetched twice, whoever finds it.
            models.UniqueConstraint(fields=["job", "url"], name="crawlpage_url_once"),
        ]
        indexes = [
            # The next page: breadth-first among the job's queued pages.
            models.Index(
                fields=["job", "depth", "id"],
                name="crawlpage_next",
                condition=Q(state="queued"),
            ),
            models.Index(fields=["job", "id"], name="crawlpage_job_order"),
        ]

    def __str__(self) -> str:
        return self.url
