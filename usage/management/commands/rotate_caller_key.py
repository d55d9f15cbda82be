"""Rotate the caller-label key: an explicit operator action, never a silent one.

The key lives in the environment (TOLLGATE_CALLER_KEY), which a command cannot change: this
prints a fresh key and what deploying it does, and refuses without --confirm.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.config import tollgate
from usage.pseudonym import new_caller_key, window_id

CONSEQUENCES = (
    "Every end user gets a new caller label: per-caller rate limits and budgets start again "
    "from zero, new usage rows no longer share labels with old ones, and vendors see new "
    "`user` values."
)


class Command(BaseCommand):
    help = "Print a new TOLLGATE_CALLER_KEY (with --confirm) and how to deploy it."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--confirm",
            action="store_true",
            help="I understand that every caller label changes once the new key is deployed.",
        )

    def handle(self, *args, confirm: bool = False, **options) -> None:
        if not confirm:
            raise CommandError(
                f"Refusing to rotate the caller key without --confirm. {CONSEQUENCES}"
            )
        configured = "set" if tollgate().caller_key else "not set"
        self.stdout.write(
            "\n".join(
                [
                    "New caller key (shown once; it is not stored anywhere):",
                    "",
                    f"TOLLGATE_CALLER_KEY={new_caller_key()}",
                    "",
                    f"The current TOLLGATE_CALLER_KEY is {configured}; nothing has changed yet.",
                    "To rotate: set this value on every gateway replica and Celery worker, then "
                    "restart them together (replicas on different keys label one user twice).",
                    f"{CONSEQUENCES} Labels are per {tollgate().caller_window} "
                    f"(now {window_id()}); rotating at the start of a window loses least.",
                    "",
                ]
            )
        )
