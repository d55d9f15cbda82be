"""Operators' view of usage: the log with its attempt trail, events with their delivery, and
the rows the database refused (dead letters).

Read-only: usage is a record. The one action queues failed events for delivery again.
"""

from __future__ import annotations

from django.contrib import admin, messages

from core.admin_views import Dollars, LargeTable, ReadOnly, html_table
from core.usage_record import ATTEMPT_FIELDS, LOG_FIELDS, AttemptRecord
from usage.models import (
    ROLLUP_KEY,
    ROLLUP_SUMS,
    TAG_SUMS,
    UsageDeadLetter,
    UsageEvent,
    UsageLog,
    UsageRollup,
    UsageTagRollup,
)
from usage.services import usage_events_redeliver

WEB_UNIT_LABELS = (
    ("web_pages", "pages"),
    ("web_rendered_pages", "rendered"),
    ("web_queries", "queries"),
)


def _shown(attempt: AttemptRecord, name: str) -> object:
    value = getattr(attempt, name)
    return "-" if value is None else value  # the admin's mark for no value


class StatusFilter(admin.SimpleListFilter):
    """Fixed choices: reading the distinct statuses of every row would scan them all."""

    title = "status"
    parameter_name = "outcome"
    RANGES = {"ok": (200, 299), "refused": (400, 499), "failed": (500, 599)}

    def lookups(self, request, model_admin):
        return [("ok", "2xx served"), ("refused", "4xx refused"), ("failed", "5xx failed")]

    def queryset(self, request, queryset):
        bounds = self.RANGES.get(self.value())
        return queryset.filter(status__range=bounds) if bounds else queryset


class EndpointFilter(admin.SimpleListFilter):
    """Fixed choices by kind of endpoint, for the same reason."""

    title = "endpoint"
    parameter_name = "kind"
    KINDS = {"chat": "chat", "messages": "messages", "web": "web.", "internal": "internal."}

    def lookups(self, request, model_admin):
        return [
            ("chat", "OpenAI chat"),
            ("messages", "Anthropic messages"),
            ("web", "Web (scrape, search, crawl)"),
            ("internal", "Internal"),
        ]

    def queryset(self, request, queryset):
        prefix = self.KINDS.get(self.value())
        if prefix is None:
            return queryset
        if prefix.endswith("."):
            return queryset.filter(endpoint__startswith=prefix)
        return queryset.filter(endpoint=prefix)


@admin.register(UsageLog)
class UsageLogAdmin(Dollars, LargeTable, ReadOnly, admin.ModelAdmin):
    # What an operator scans a log for first, the request, its model, status and cost, then
    # the rest, so a laptop's width shows those whole; every other field is on the row's page.
    list_display = [
        "request_id",
        "model_requested",
        "status",
        "provider_cost_micro",
        "error_code",
        "created_at",
        "account_id",
        "served_by",
        "endpoint",
        "tokens_in",
        "tokens_out",
        "web_units",
        "latency_ms",
    ]
    list_filter = ["served_by", StatusFilter, "streamed", EndpointFilter]
    # The gateway's request id, exactly: found on its index, not by scanning every row.
    search_fields = ["=request_id"]
    search_help_text = "An exact request id (the X-Tollgate-Request-Id of the response)."
    ordering = ["-created_at", "-id"]
    fields = [*LOG_FIELDS, "stored_at", "attempt_table"]  # the usage record, as stored
    readonly_fields = ["attempt_table"]

    @admin.display(description="attempts")
    def attempt_table(self, row: UsageLog) -> str:
        """Show the attempt trail as a table: a column per attempt field, a row per attempt."""
        cells = [[_shown(a, name) for name in ATTEMPT_FIELDS] for a in row.attempts]
        return html_table(ATTEMPT_FIELDS, cells, empty="-", css_class="attempt-trail")

    @admin.display(description="web units")
    def web_units(self, row: UsageLog) -> str:
        """Show a row's web units in one column, by kind: the three never add up to one number."""
        counts = [(getattr(row, field), label) for field, label in WEB_UNIT_LABELS]
        return ", ".join(f"{label} {count}" for count, label in counts if count) or "-"


@admin.register(UsageRollup)
class UsageRollupAdmin(Dollars, LargeTable, ReadOnly, admin.ModelAdmin):
    """Usage per hour and key: the totals every summary reads, kept with the rows."""

    list_display = [
        "hour",
        "account_id",
        "group_id",
        "api_key_id",
        "endpoint",
        "model_served",
        "served_by",
        "requests",
        "errors",
        "tokens_in",
        "tokens_out",
        "provider_cost_micro",
        "bandwidth_charge_micro",
    ]
    list_filter = ["served_by"]
    search_fields = ["=account_id", "=group_id", "=api_key_id"]
    search_help_text = "An exact account, group or key id."
    ordering = ["-hour"]
    fields = ["hour", *ROLLUP_KEY, "requests", "errors", *ROLLUP_SUMS]


@admin.register(UsageTagRollup)
class UsageTagRollupAdmin(Dollars, LargeTable, ReadOnly, admin.ModelAdmin):
    """Usage per hour, account and request tag (usage/tags.py): what /api/usage/tags reads."""

    list_display = ["hour", "account_id", "tag", "requests", "errors", "provider_cost_micro"]
    list_filter = ["hour"]
    search_fields = ["=account_id", "=tag"]
    search_help_text = "An exact account id or tag."
    ordering = ["-hour"]
    fields = ["hour", "account_id", "tag", "requests", "errors", *TAG_SUMS]


@admin.register(UsageEvent)
class UsageEventAdmin(Dollars, LargeTable, ReadOnly, admin.ModelAdmin):
    list_display = [
        "window_start",
        "window_s",
        "account_id",
        "group_id",
        "delivery",
        "delivery_attempts",
        "last_error",
        "next_attempt_at",
        "delivered_at",
    ]
    list_filter = ["delivery"]
    search_fields = ["=group_id", "=account_id"]
    ordering = ["-window_start"]
    actions = ["deliver_again"]

    @admin.action(description="Queue the selected events for delivery again")
    def deliver_again(self, request, queryset) -> None:
        queued = usage_events_redeliver(event_ids=queryset.values_list("pk", flat=True))
        self.message_user(request, f"{queued} event(s) queued for delivery.", messages.SUCCESS)


@admin.register(UsageDeadLetter)
class UsageDeadLetterAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["request_id", "created_at", "last_tried_at", "tries", "error"]
    list_filter = ["created_at"]
    search_fields = ["=request_id", "error"]
    date_hierarchy = "created_at"  # a handful of rows: the drill-down costs nothing
    readonly_fields = ("request_id", "created_at", "last_tried_at", "tries", "error", "row")
    fields = readonly_fields
