"""What an operator sees of SCIM in the admin: read-only, since a change belongs to the
account's directory (through /scim/v2/) or its owner (the token), each audited there."""

from __future__ import annotations

from django.contrib import admin

from scim.models import ScimGroup, ScimToken, ScimUser


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ScimToken)
class ScimTokenAdmin(ReadOnly):
    list_display = ("account", "prefix", "created_at", "previous_valid_until")
    fields = ("account", "prefix", "created_at", "previous_valid_until")  # never a hash
    search_fields = ("account__name", "prefix")
    list_filter = ("created_at",)


@admin.register(ScimUser)
class ScimUserAdmin(ReadOnly):
    list_display = ("user", "account", "external_id", "active", "updated_at")
    search_fields = ("user__username", "account__name", "external_id")
    list_filter = ("active",)


@admin.register(ScimGroup)
class ScimGroupAdmin(ReadOnly):
    list_display = ("display_name", "account", "external_id", "updated_at")
    search_fields = ("display_name", "account__name", "external_id")
    list_filter = ("updated_at",)
