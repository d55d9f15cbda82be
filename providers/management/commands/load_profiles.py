"""Create or update provider profiles from PROVIDER_PROFILES_JSON (or --json)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.actors import system
from providers.services import profiles_bootstrap, read_profiles_spec


class Command(BaseCommand):
    help = "Bootstrap provider profiles from PROVIDER_PROFILES_JSON (inline JSON or a file path)."

    def add_arguments(self, parser):
        parser.add_argument("--json", help="Inline JSON or a file path (default: the setting).")

    def handle(self, *args, **options):
        raw = options["json"] or settings.PROVIDER_PROFILES_JSON
        if not raw:
            raise CommandError("Nothing to load: set PROVIDER_PROFILES_JSON or pass --json.")
        profiles = profiles_bootstrap(
            spec=read_profiles_spec(raw), actor=system("manage.py load_profiles")
        )
        self.stdout.write(
            f"loaded {len(profiles)} profile(s): {', '.join(p.name for p in profiles)}"
        )
