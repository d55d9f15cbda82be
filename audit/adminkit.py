"""What the operator's admin pages share for the trail: the operator as the actor, and
deletes recorded (one row's, or the changelist's bulk delete)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import transaction

from audit import services
from audit.actors import Actor, request_actor


def operator(request: Any) -> Actor:
    """The operator signed into the admin, from the request's address."""
    return request_actor(request, operator=True)


class AuditedDeletes:
    """ModelAdmin mixin: a delete appends `<audit_type>.delete` with the row's audited fields,
    in the delete's transaction. Set `audit_type`; override `audit_account_id` (None for an
    operator-wide row), `audit_before` and `audit_label` as the row needs."""

    audit_type: ClassVar[str]
    audit_delete_action: ClassVar[str] = ""  # default: "<audit_type>.delete"

    def audit_account_id(self, obj: Any) -> int | None:
        return obj.account_id

    def audit_before(self, obj: Any) -> dict:
        return {}

    def audit_label(self, obj: Any) -> str:
        return str(obj)

    def record_delete(self, request: Any, obj: Any) -> None:
        services.record(
            actor=operator(request),
            action=self.audit_delete_action or f"{self.audit_type}.delete",
            account_id=self.audit_account_id(obj),
            target_type=self.audit_type,
            target_id=obj.pk,
            target_label=self.audit_label(obj),
            before=self.audit_before(obj),
        )

    def delete_model(self, request: Any, obj: Any) -> None:
        with transaction.atomic():
            self.record_delete(request, obj)
            super().delete_model(request, obj)  # type: ignore[misc]

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.record_delete(request, obj)
            super().delete_queryset(request, queryset)  # type: ignore[misc]
