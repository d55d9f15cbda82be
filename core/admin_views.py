"""What the apps' admin pages share."""

from __future__ import annotations


class ReadOnly:
    """Admin mixin for a record kept by Tollgate itself (a log, a ledger, a job): listed and
    read, never added, changed or deleted by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
