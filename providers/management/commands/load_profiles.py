"""Create or update provider profiles from PROVIDER_PROFILES_JSON (or --json)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from audit.actors import system
from providers.spec import profiles_bootstrap, read_profiles_spec


class Command(BaseCommand):
    help = "Bootstrap provider profiles from PROVIDER_PROFILES_JSON (inline JSON or a file path)."

    def add_arguments(self, parser):
        parser.add_argument("--json", help="Inline JSON or a file path (default: the setting).")

    def handle(self, *args, **options):
        raw = options["json"] or settings.PROVIDER_PROFILES_JSON
        if not raw:
            raise CommandError("Nothing to load: set PROVIDER_PROFILES_JSON or pass --json.")
        # A missing or malformed file is the operator's to fix: one line naming it, no traceback.
        try:
            spec = read_profiles_spec(raw)
        except ImproperlyConfigured as exc:
            raise CommandError(f"{exc} (given: {_shown(raw)})") from None
        profiles = profiles_bootstrap(spec=spec, actor=system("manage.py load_profiles"))
        self.stdout.write(
            f"loaded {len(profiles)} profile(s): {', '.join(p.name for p in profiles)}"
        )


def _shown(raw: str) -> str:
    """The value as the operator wrote it: a path whole, inline JSON cut short."""
    text = raw.strip()
    return text if not text.startswith("[") else f"inline JSON, {len(text)} characters"
