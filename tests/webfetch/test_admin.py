"""The operators' crawl pages: read-only, and the page list never carries page text."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.urls import reverse

from webfetch.crawl import PageOutcome
from webfetch.jobs import claim_job, next_page, record_page


def test_admin_lists_jobs_and_pages_without_page_text(new_job, client):
    new_job(formats=["text", "html"])
    job = claim_job(worker="w")
    page = next_page(job, worker="w")
    record_page(
        page,
        PageOutcome(
            state="fetched", status=200, text="TEXT-NOT-IN-LISTS", html="<b>H</b>", units=1
        ),
    )
    admin = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw-for-tests")
    client.force_login(admin)

    jobs = client.get(reverse("admin:webfetch_crawljob_changelist"))
    assert jobs.status_code == 200 and job.public_id in jobs.content.decode()
    pages = client.get(reverse("admin:webfetch_crawlpage_changelist"))
    assert pages.status_code == 200
    assert "http://site.test/" in pages.content.decode()
    assert "TEXT-NOT-IN-LISTS" not in pages.content.decode()
    assert client.get(reverse("admin:webfetch_crawlpage_add")).status_code == 403
    assert client.get(reverse("admin:webfetch_crawljob_delete", args=[job.pk])).status_code == 403
    assert client.get(reverse("admin:webfetch_crawlpage_change", args=[page.pk])).status_code == 200
