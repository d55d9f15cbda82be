"""Re-seal every team key under the newest SEALING_KEYS version (resumable)."""

from django.core.management.base import BaseCommand

from byok.services import team_keys_reseal


class Command(BaseCommand):
    help = "Re-seal team keys under the newest master key; safe to interrupt and re-run."

    def handle(self, *args, **options):
        self.stdout.write(f"re-sealed {team_keys_reseal()} key(s)")
