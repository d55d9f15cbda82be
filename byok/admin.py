from django.contrib import admin

from byok.models import KeyPool, TeamKey


class TeamKeyInline(admin.TabularInline):
    model = TeamKey
    fields = ["label", "last4", "status", "benched_until", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(KeyPool)
class KeyPoolAdmin(admin.ModelAdmin):
    list_display = ["group", "provider", "fallback", "updated_at"]
    search_fields = ["group__name", "group__account__name", "provider"]
    list_filter = ["provider", "fallback"]
    readonly_fields = ["group", "provider", "fallback", "updated_at"]
    inlines = [TeamKeyInline]

    def has_add_permission(self, request):
        return False  # keys arrive through the BYOK API, which seals them


@admin.register(TeamKey)
class TeamKeyAdmin(admin.ModelAdmin):
    list_display = ["label", "last4", "status", "benched_until", "pool", "created_at"]
    search_fields = ["label", "last4", "pool__group__name"]
    list_filter = ["status", "pool__provider"]
    fields = ["pool", "label", "last4", "status", "benched_until", "created_at"]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
