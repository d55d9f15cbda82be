from django.contrib import admin
from django.db.models.functions import Length

from gateway.models import IdempotencyRecord


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(admin.ModelAdmin):
    """Read-only: records are written by the gateway; deleting one frees its key."""

    list_display = ["key", "account", "state", "status", "request_id", "stored_bytes", "expires_at"]
    list_filter = ["state"]
    search_fields = ["key", "request_id"]
    readonly_fields = [
        "account",
        "key",
        "fingerprint",
        "state",
        "request_id",
        "status",
        "headers",
        "stored_bytes",
        "created_at",
        "expires_at",
    ]
    exclude = ["body"]

    def get_queryset(self, request):
        # Answers may be megabytes each: the list shows their size, never loads them.
        return super().get_queryset(request).defer("body").annotate(body_bytes=Length("body"))

    @admin.display(description="stored bytes")
    def stored_bytes(self, obj):
        return obj.body_bytes if obj.body_bytes is not None else "—"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
