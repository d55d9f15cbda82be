from django.contrib import admin

from usage.models import UsageAttempt, UsageEvent, UsageLog


class ReadOnly:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class UsageAttemptInline(ReadOnly, admin.TabularInline):
    model = UsageAttempt
    extra = 0
    fields = [
        "order",
        "provider",
        "model",
        "served_by",
        "source",
        "outcome",
        "upstream_status",
        "latency_ms",
        "reservation_id",
    ]
    readonly_fields = fields


@admin.register(UsageLog)
class UsageLogAdmin(ReadOnly, admin.ModelAdmin):
    list_display = [
        "request_id",
        "created_at",
        "group_id",
        "model_requested",
        "provider",
        "served_by",
        "status",
        "error_code",
        "tokens_in",
        "tokens_out",
        "byok_tokens_in",
        "byok_tokens_out",
        "provider_cost_micro",
        "bytes_in",
        "bytes_out",
        "bandwidth_charge_micro",
    ]
    list_filter = ["served_by", "status", "streamed"]
    search_fields = ["request_id", "caller_label"]
    inlines = [UsageAttemptInline]


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnly, admin.ModelAdmin):
    list_display = [
        "window_start",
        "account_id",
        "group_id",
        "delivery",
        "delivery_attempts",
        "last_error",
        "delivered_at",
    ]
    list_filter = ["delivery"]
