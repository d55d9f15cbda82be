"""Provision a tenant from a shell; prints its secrets once."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from accounts.logins import password_link_url
from audit.actors import system
from billing.services import tenant_provision


class Command(BaseCommand):
    help = (
        "Create an account, owner, tenant API token, group, virtual key and wallet; print the"
        " secrets and the owner's one-time set-password link."
    )

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--budget-micro", type=int, default=None)
        parser.add_argument("--wallet-micro", type=int, default=0)
        parser.add_argument("--invoiced", action="store_true")
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args, **options):
        for flag in ("budget_micro", "wallet_micro"):
            if options[flag] is not None and options[flag] < 0:
                raise CommandError(f"--{flag.replace('_', '-')} must not be negative.")
        try:
            tenant = tenant_provision(
                name=options["name"],
                budget_max_micro=options["budget_micro"],
                wallet_micro=options["wallet_micro"],
                invoiced=options["invoiced"],
                actor=system("manage.py create_tenant"),
            )
        except IntegrityError:
            raise CommandError(f"A tenant named {options['name']!r} already exists.") from None
        data = tenant.as_json()
        # The owner's one-time link to set a dashboard password, on the control plane's
        # public address (TOLLGATE_PUBLIC_URL).
        owner = get_user_model().objects.get(username=tenant.username)
        base_url = settings.PUBLIC_URL
        if not base_url:
            base_url = "http://127.0.0.1:8000"
            self.stderr.write(
                "TOLLGATE_PUBLIC_URL is not set: the password link assumes " + base_url + "."
            )
        data["password_link"] = password_link_url(user=owner, base_url=base_url)
        if options["json"]:
            self.stdout.write(json.dumps(data))
        else:
            for key, value in data.items():
                self.stdout.write(f"{key}: {value}")
