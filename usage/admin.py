"""Operators' view of usage: the log with its attempt trail, events with their delivery, and
the rows the database refused (dead letters).

Read-only: usage is a record. The one action queues failed events for delivery again.
"""

from __future__ import annotations

from django.contrib import admin, messages

from core.admin_views import ReadOnly
from core.usage_record import ATTEMPT_FIELDS, LOG_FIELDS
from usage.models import UsageAttempt, UsageDeadLetter, UsageEvent, UsageLog
from usage.services import usage_events_redeliver

WEB_UNIT_LABELS = (
    ("web_pages", "pages"),
    ("web_rendered_pages", "rendered"),
    ("web_queries", "queries"),
)


class UsageAttemptInline(ReadOnly, admin.TabularInline):
    model = UsageAttempt
    extra = 0
    can_delete = False
    fields = ATTEMPT_FIELDS
    readonly_fields = fields


@admin.register(UsageLog)
class UsageLogAdmin(ReadOnly, admin.ModelAdmin):
    list_display = [
        "request_id",
        "created_at",
        "account_id",
        "group_id",
        "caller_label",
        "endpoint",
        "model_requested",
        "provider",
        "served_by",
        "status",
        "error_code",
        "tokens_in",
        "tokens_out",
        "byok_tokens_in",
        "byok_tokens_out",
        "web_units",
        "provider_cost_micro",
        "bytes_in",
        "bytes_out",
        "bandwidth_charge_micro",
        "latency_ms",
    ]
    list_filter = ["served_by", "status", "streamed", "endpoint"]
    search_fields = ["request_id", "caller_label", "model_requested", "model_served"]
    date_hierarchy = "created_at"
    fields = [*LOG_FIELDS, "stored_at"]  # the usage record, as stored
    inlines = [UsageAttemptInline]

    @admin.display(description="web units")
    def web_units(self, row: UsageLog) -> str:
        """Show a row's web units in one column, by kind: the three never add up to one number."""
        counts = [(getattr(row, field), label) for field, label in WEB_UNIT_LABELS]
        return ", ".join(f"{label} {count}" for count, label in counts if count) or "-"


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnly, admin.ModelAdmin):
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
    date_hierarchy = "window_start"
    actions = ["deliver_again"]

    @admin.action(description="Queue the selected events for delivery again")
    def deliver_again(self, request, queryset) -> None:
        queued = usage_events_redeliver(event_ids=queryset.values_list("pk", flat=True))
        self.message_user(request, f"{queued} event(s) queued for delivery.", messages.SUCCESS)


@admin.register(UsageDeadLetter)
class UsageDeadLetterAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["request_id", "created_at", "last_tried_at", "tries", "error"]
    search_fields = ["=request_id", "error"]
    date_hierarchy = "created_at"
    fields = ["request_id", "created_at", "last_tried_at", "tries", "error", "row"]
    readonly_fields = fields
