"""The gateway's Celery tasks: thin interfaces, safe to run on several workers at once."""

from __future__ import annotations

import asyncio

from celery import shared_task


@shared_task(name="webfetch.run_crawls")
def run_crawls() -> int:
    """Claim queued crawl jobs (SKIP LOCKED: each by one worker) and run them to their end."""
    from gateway.web.crawler import work  # the gateway's parts load with the task, not Celery

    return asyncio.run(work())
