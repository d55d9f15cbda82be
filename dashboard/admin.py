"""Operators issue dashboard logins from the Django admin: a one-time set-password link."""

from __future__ import annotations

from django.contrib import admin, messages

from accounts.logins import password_link_issue
from accounts.models import Membership


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "account", "role"]
    list_filter = ["role"]
    search_fields = ["user__username", "account__name"]
    actions = ["issue_password_link"]

    @admin.action(description="Issue a one-time set-password link for the dashboard")
    def issue_password_link(self, request, queryset):
        for membership in queryset.select_related("user"):
            link = request.build_absolute_uri(password_link_issue(user=membership.user))
            # Shown once to the operator, who hands it to the member; never logged.
            self.message_user(request, f"{membership.user}: {link}", messages.SUCCESS)
