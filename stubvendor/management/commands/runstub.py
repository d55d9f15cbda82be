"""``python manage.py runstub --host 127.0.0.1 --port 8765``: run the stub LLM vendor server."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from stubvendor.server import DEFAULT_HOST, DEFAULT_PORT, run


class Command(BaseCommand):
    help = "Run the stub OpenAI/Anthropic vendor server (see stubvendor/server.py)."
    requires_system_checks = ()  # needs no database or other apps
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=DEFAULT_HOST)
        parser.add_argument("--port", type=int, default=DEFAULT_PORT)

    def handle(self, *args: Any, **options: Any) -> None:
        run(options["host"], options["port"])
