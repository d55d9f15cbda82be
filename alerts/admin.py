"""The operator's view of tenant alerts: rules, webhooks (never their secrets), firings and
deliveries with their tries."""

from __future__ import annotations

from django.contrib import admin

from alerts.models import AlertAttempt, AlertDelivery, AlertFiring, AlertRule, AlertWebhook


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("id", "account", "name", "scope", "threshold_pcts", "amount_micro", "enabled")
    list_filter = ("scope", "enabled")
    search_fields = ("name", "account__name", "tag")
    raw_id_fields = ("account", "group", "api_key")


@admin.register(AlertWebhook)
class AlertWebhookAdmin(admin.ModelAdmin):
    list_display = ("id", "account", "url", "secret_prefix", "enabled", "created_at")
    list_filter = ("enabled",)
    search_fields = ("url", "account__name", "description")
    raw_id_fields = ("account",)
    readonly_fields = ("secret_prefix",)


@admin.register(AlertFiring)
class AlertFiringAdmin(admin.ModelAdmin):
    list_display = ("id", "rule", "period", "threshold", "value_micro", "created_at")
    list_filter = ("rule__scope",)
    search_fields = ("rule__name", "rule__account__name", "period")
    raw_id_fields = ("rule",)


class AlertAttemptInline(admin.TabularInline):
    model = AlertAttempt
    extra = 0
    can_delete = False
    readonly_fields = ("number", "status_code", "error", "duration_ms", "created_at")


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "account", "event_id", "channel", "state", "attempts", "last_status_code")
    list_filter = ("state", "channel")
    search_fields = ("event_id", "account__name", "last_error")
    raw_id_fields = ("account", "firing", "webhook")
    inlines = [AlertAttemptInline]
