"""Operators' view of crawls: jobs with their state, counters and cost; pages without their
text in the lists. Read-only: a crawl is a record (tenants cancel through their route)."""

from __future__ import annotations

from django.contrib import admin

from core.admin_views import Dollars, ReadOnly
from webfetch.models import CrawlJob, CrawlPage

_PAGE_CONTENT = ("text", "markdown", "html")


@admin.register(CrawlJob)
class CrawlJobAdmin(Dollars, ReadOnly, admin.ModelAdmin):
    list_display = [
        "public_id",
        "created_at",
        "account",
        "group",
        "state",
        "stop_reason",
        "pages_fetched",
        "pages_failed",
        "pages_skipped",
        "units",
        "cost_micro",
        "bytes",
        "worker",
        "finished_at",
    ]
    list_filter = ["state", "render_js", "respect_robots"]
    list_select_related = ["account", "group"]
    search_fields = ["=public_id", "client_request_id", "seed_url"]
    date_hierarchy = "created_at"


@admin.register(CrawlPage)
class CrawlPageAdmin(Dollars, ReadOnly, admin.ModelAdmin):
    list_display = [
        "id",
        "job",
        "url",
        "depth",
        "state",
        "skip_reason",
        "status",
        "error_code",
        "provider",
        "units",
        "cost_micro",
        "bytes",
        "fetched_at",
    ]
    list_filter = ["state", "skip_reason"]
    list_select_related = ["job"]
    search_fields = ["=job__public_id", "url", "=request_id"]
    raw_id_fields = ["job"]

    def get_queryset(self, request):
        # The list never shows page content: do not read it (up to 600k chars a page).
        queryset = super().get_queryset(request)
        if request.resolver_match and request.resolver_match.url_name.endswith("changelist"):
            queryset = queryset.defer(*_PAGE_CONTENT)
        return queryset
