"""The whole trail for operators: every account's entries, searchable and filterable, read
only, and exported (CSV, JSON lines) as filtered, or the selected entries."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import path

from audit import export
from audit.models import AuditEntry
from audit.summary import summary
from core.admin_views import LargeTable, ReadOnly

# The entry's page: every field, read only.
SHOWN = (
    "account_id",
    "seq",
    "created_at",
    "actor_kind",
    "actor_id",
    "actor_label",
    "remote_addr",
    "action",
    "target_type",
    "target_id",
    "target_label",
    "change",
    "before",
    "after",
    "consent",
    "prev_hash",
    "hash",
)


class AccountFilter(admin.SimpleListFilter):
    """One account's chain (`?account=ID`, as the account's page links it), or the
    operator-wide one; the list offers only the latter (accounts are many)."""

    title = "account"
    parameter_name = "account"

    def lookups(self, request, model_admin):
        return [("none", "Operator-wide (no account)")]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "none":
            return queryset.filter(account_id__isnull=True)
        if value and value.isdigit():
            return queryset.filter(account_id=int(value))
        return queryset


@admin.register(AuditEntry)
class AuditEntryAdmin(LargeTable, ReadOnly, admin.ModelAdmin):
    list_display = [
        "id",
        "created_at",
        "account_id",
        "actor_kind",
        "actor_label",
        "remote_addr",
        "action",
        "target",
        "change",
    ]
    list_filter = [AccountFilter, "actor_kind", "action", "target_type", "created_at"]
    search_fields = ["=account_id", "=actor_label", "=action", "=target_id", "=remote_addr"]
    search_help_text = (
        "Exactly: an account id, an actor (a username; a token as 'NAME via token PREFIX…'), "
        "an action (key.revoke), a target id or an address."
    )
    ordering = ["-id"]
    actions = ["export_csv", "export_jsonl"]
    change_list_template = "admin/audit/auditentry/change_list.html"
    fields = SHOWN
    readonly_fields = SHOWN

    @admin.display(description="target")
    def target(self, entry: AuditEntry) -> str:
        return f"{entry.target_type} {entry.target_id} {entry.target_label}".strip()

    @admin.display(description="change (USD)")
    def change(self, entry: AuditEntry) -> str:
        return summary(entry)

    # Exports: the selected entries (actions), or all under the list's filters (links).

    @admin.action(description="Export selected entries as CSV")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[AuditEntry]):
        return export.csv_response(queryset)

    @admin.action(description="Export selected entries as JSON lines")
    def export_jsonl(self, request: HttpRequest, queryset: QuerySet[AuditEntry]):
        return export.jsonl_response(queryset)

    def get_urls(self) -> list[Any]:
        exports = [
            path("export.csv", self.admin_site.admin_view(self.export_all_csv)),
            path("export.jsonl", self.admin_site.admin_view(self.export_all_jsonl)),
        ]
        return exports + super().get_urls()

    def _listed(self, request: HttpRequest) -> QuerySet[AuditEntry]:
        """The entries the changelist shows under the request's filters and search."""
        return self.get_changelist_instance(request).get_queryset(request)

    def export_all_csv(self, request: HttpRequest) -> StreamingHttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return export.csv_response(self._listed(request))

    def export_all_jsonl(self, request: HttpRequest) -> StreamingHttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return export.jsonl_response(self._listed(request))
