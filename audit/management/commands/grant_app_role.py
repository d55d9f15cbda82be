"""Set up the application's database role (core/db_roles.py): run as the owner after migrate."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from core.db_roles import grant_app_role


class Command(BaseCommand):
    help = (
        "As the database owner (DATABASE_OWNER_URL), make DATABASE_URL's role the application's:"
        " created if missing, with DATABASE_URL's password; owner of every table but the proof"
        " (audit trail, receipts, signed heads, wallet ledger), on which it may only INSERT and"
        " SELECT. Run after every migrate. Idempotent."
    )

    def handle(self, *args, **options):
        if connection.vendor != "postgresql":
            raise CommandError("grant_app_role is for PostgreSQL (DATABASE_URL).")
        app = getattr(settings, "APP_DATABASE", {})
        role = app.get("USER") or ""
        if not role:
            raise CommandError("DATABASE_URL names no role (user) for the application.")
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                granted = grant_app_role(cursor, role=role, password=app.get("PASSWORD") or None)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{'created' if granted.created else 'updated'} role {granted.role}: owns"
            f" {granted.handed_over} tables; may only insert into and read"
            f" {', '.join(granted.proof)}"
        )
