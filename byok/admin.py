from django.contrib import admin
from django.db import transaction

from audit.adminkit import operator
from byok import services
from byok.models import KeyPool, TeamKey


class TeamKeyInline(admin.TabularInline):
    model = TeamKey
    readonly_fields = ("label", "last4", "status", "benched_until", "created_at")
    fields = readonly_fields
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

    # A delete goes through the service (evicted from every replica, and in the trail), once
    # the admin's transaction is over: replicas told inside it would reload the old pools.
    def delete_model(self, request, obj):
        actor = operator(request)
        transaction.on_commit(lambda: services.pool_delete(pool=obj, actor=actor))

    def delete_queryset(self, request, queryset):
        actor = operator(request)
        for pool in list(queryset):
            transaction.on_commit(lambda pool=pool: services.pool_delete(pool=pool, actor=actor))


@admin.register(TeamKey)
class TeamKeyAdmin(admin.ModelAdmin):
    list_display = ["label", "last4", "status", "benched_until", "pool", "created_at"]
    search_fields = ["label", "last4", "pool__group__name"]
    list_filter = ["status", "pool__provider"]
    readonly_fields = ("pool", "label", "last4", "status", "benched_until", "created_at")
    fields = readonly_fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def delete_model(self, request, obj):
        actor = operator(request)
        transaction.on_commit(lambda: services.team_key_delete(team_key=obj, actor=actor))

    def delete_queryset(self, request, queryset):
        actor = operator(request)
        for key in list(queryset):
            transaction.on_commit(lambda k=key: services.team_key_delete(team_key=k, actor=actor))
