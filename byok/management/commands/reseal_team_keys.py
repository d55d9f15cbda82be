"""Re-seal every team key under the newest SEALING_KEYS version (resumable)."""

from django.core.management.base import BaseCommand

from audit.actors import system
from byok.services import team_keys_reseal


class Command(BaseCommand):
    help = "Re-seal team keys under the newest master key; safe to interrupt and re-run."

    def handle(self, *args, **options):
        done = team_keys_reseal(actor=system("manage.py reseal_team_keys"))
        self.stdout.write(f"re-sealed {done} key(s)")
