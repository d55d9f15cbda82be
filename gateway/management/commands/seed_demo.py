"""Seed the embedded demo: stub-backed provider profiles, a funded demo tenant and two logins.

Idempotent: a second run keeps everything and, since secrets are shown once, mints a fresh
demo key and tenant API token (revoking the previous ones) and fresh passwords for the
operator (Django admin) and the demo tenant's owner (dashboard), so the printed lines always
work.
"""

from __future__ import annotations

import json
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.models import Account, ApiKey, Membership
from accounts.services import (
    api_key_create,
    api_key_revoke,
    tenant_token_create,
    tenant_tokens_revoke,
)
from billing.services import tenant_provision
from providers.models import ProviderProfile
from providers.services import profile_set_platform_key, profiles_bootstrap

DEMO_ACCOUNT = "demo"
DEMO_WALLET_MICRO = 100_000_000  # 100 USD
STUB_PLATFORM_KEY = "sk-stub-platform-demo"
OPERATOR_USERNAME = "operator"


def demo_profiles(stub_url: str) -> list[dict]:
    return [
        {
            "name": "stub-openai",
            "kind": "openai",
            "base_url": f"{stub_url}/v1",
            "models": [
                {
                    "name": "gpt-4o-mini",
                    "upstream": "gpt-4o-mini",
                    "input_micro_per_mtok": 150_000,
                    "output_micro_per_mtok": 600_000,
                    "cached_input_micro_per_mtok": 75_000,
                },
                {
                    "name": "text-embedding-3-small",
                    "kind": "embedding",
                    "input_micro_per_mtok": 20_000,
                    "output_micro_per_mtok": 0,
                },
            ],
        },
        {
            "name": "stub-anthropic",
            "kind": "anthropic",
            "base_url": stub_url,
            "models": [
                {
                    "name": "claude-3-5-haiku",
                    "upstream": "claude-3-5-haiku-latest",
                    "aliases": ["claude-3-5-haiku-latest"],
                    "input_micro_per_mtok": 800_000,
                    "output_micro_per_mtok": 4_000_000,
                    "cached_input_micro_per_mtok": 80_000,
                    "cache_write_micro_per_mtok": 1_000_000,
                },
            ],
        },
        # Web acquisition: our own fetcher first, the stub as renderer and search vendor.
        {"name": "direct", "kind": "direct_http", "timeout_s": 10, "units": {"page": 100}},
        {
            "name": "stub-render",
            "kind": "render_api",
            "base_url": f"{stub_url}/web/v1",
            "timeout_s": 15,
            "units": {"rendered_page": 2_000},
        },
        {
            "name": "stub-search",
            "kind": "search_api",
            "base_url": f"{stub_url}/web/v1",
            "timeout_s": 15,
            "units": {"query": 5_000},
        },
        {
            "name": "fake",
            "kind": "fake",
            "models": [
                {
                    "name": "fake-model",
                    "input_micro_per_mtok": 1_000,
                    "output_micro_per_mtok": 2_000,
                }
            ],
        },
    ]


class Command(BaseCommand):
    help = "Seed demo provider profiles (pointing at the stub) and a demo tenant; print JSON."

    def add_arguments(self, parser):
        parser.add_argument("--stub-url", default="http://127.0.0.1:8765")

    @transaction.atomic
    def handle(self, *args, **options):
        for profile in profiles_bootstrap(spec=demo_profiles(options["stub_url"].rstrip("/"))):
            keyless = profile.kind in ("fake", "direct_http")
            if not keyless and not profile.api_key_last4:
                profile_set_platform_key(profile=profile, api_key=STUB_PLATFORM_KEY)
                profile.save()
        fake = ProviderProfile.objects.get(name="fake")
        if not fake.api_key_last4:
            profile_set_platform_key(profile=fake, api_key="fake-platform-key")
            fake.save()
        account = Account.objects.filter(name=DEMO_ACCOUNT).first()
        if account is None:
            tenant = tenant_provision(name=DEMO_ACCOUNT, wallet_micro=DEMO_WALLET_MICRO)
            data = tenant.as_json()
        else:
            group = account.groups.order_by("id").first()
            for old in ApiKey.objects.filter(group=group, revoked_at__isnull=True):
                api_key_revoke(api_key=old)
            api_key, secret = api_key_create(group=group, name="demo")
            data = {"account_id": account.pk, "group_id": group.pk, "api_key": secret}
        operator_password = _fresh_password(_operator())
        owner = Membership.objects.get(
            account_id=data["account_id"], role=Membership.Role.OWNER
        ).user
        if account is not None:
            tenant_tokens_revoke(user=owner)
            data["api_token"] = tenant_token_create(user=owner)[1]
        data |= {
            "operator_username": OPERATOR_USERNAME,
            "operator_password": operator_password,
            "owner_username": owner.get_username(),
            "owner_password": _fresh_password(owner),
        }
        self.stdout.write(json.dumps(data))


def _operator():
    """Return the demo's Django admin superuser, created on the first run."""
    user, _ = get_user_model().objects.get_or_create(username=OPERATOR_USERNAME)
    user.is_staff = user.is_superuser = user.is_active = True
    return user


def _fresh_password(user) -> str:
    # Shown once, as the demo key is: each run replaces the previous one.
    password = secrets.token_urlsafe(18)
    user.set_password(password)
    user.save()
    return password
