"""Seed the embedded demo: stub-backed provider profiles, a funded demo tenant and two logins.

Idempotent: a second run keeps everything and, since secrets are shown once, mints a fresh
demo key and tenant API token (revoking the previous ones) and fresh passwords for the
operator (Django admin) and the demo tenant's owner (dashboard), so the printed lines always
work.
"""

from __future__ import annotations

import json
import secrets

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.models import Account, ApiKey, Membership
from accounts.services import (
    api_key_create,
    api_key_revoke,
)
from accounts.tokens import tenant_token_create, tenant_tokens_revoke
from billing.services import tenant_provision
from providers.models import ProviderKind, ProviderProfile
from providers.services import platform_key_add, profile_set_platform_key
from providers.spec import profiles_bootstrap

DEMO_ACCOUNT = "demo"
DEMO_WALLET_MICRO = 100_000_000  # 100 USD
STUB_PLATFORM_KEY = "sk-stub-platform-demo"
OPERATOR_USERNAME = "operator"
# The pooled demo profile's keys beside its own: label and weight.
DEMO_POOL_KEYS = (("pool-a", 2), ("pool-b", 1))


# The stub's Bedrock test credentials (stubvendor/bedrock_signing.py's TEST_CREDENTIALS: the stub
# checks each call's SigV4 signature against them).
STUB_AWS_CREDENTIALS = "AKIASTUBTESTKEY00001:stub/Secret+Key/For/Tests/0000000000000"


def demo_platform_key(kind: str, stub_url: str) -> str:
    """Return the platform key the stub takes for a demo profile of `kind`."""
    if kind == ProviderKind.BEDROCK:
        return STUB_AWS_CREDENTIALS
    if kind == ProviderKind.VERTEX:
        return demo_service_account(stub_url)
    return STUB_PLATFORM_KEY


def demo_service_account(stub_url: str) -> str:
    """A new service account's JSON key whose tokens the stub mints (it checks the claims of
    a key it was not shown)."""
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "demo",
            "private_key_id": secrets.token_hex(8),
            "private_key": pem.decode(),
            "client_email": "tollgate-demo@demo.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": f"{stub_url}/_stub/google/token",
        }
    )


def demo_profiles(stub_url: str) -> list[dict]:
    """The demo's profiles, every model's answers cacheable (the response cache's demo)."""
    profiles = _demo_profiles(stub_url)
    for profile in profiles:
        for model in profile.get("models", ()):
            model["cacheable"] = True
    return profiles


def _demo_profiles(stub_url: str) -> list[dict]:
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
                # OpenAI's moderation is free: its prices are 0 (the stub reports usage).
                {
                    "name": "omni-moderation-latest",
                    "kind": "moderation",
                    "input_micro_per_mtok": 0,
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
        # Several platform keys sharing one profile's calls (two more, sealed, added below).
        {
            "name": "stub-openai-pooled",
            "kind": "openai",
            "base_url": f"{stub_url}/v1",
            "key_strategy": "weighted",
            "models": [
                {
                    "name": "gpt-4o-mini-pooled",
                    "upstream": "gpt-4o-mini",
                    "input_micro_per_mtok": 150_000,
                    "output_micro_per_mtok": 600_000,
                }
            ],
        },
        # The platform vendors, each on the stub's routes for it: Azure OpenAI (a deployment
        # path with its api-version), Bedrock (Converse, SigV4-signed), Gemini and Vertex AI.
        {
            "name": "stub-azure",
            "kind": "azure",
            "base_url": f"{stub_url}/azure-demo",
            "api_version": "2024-10-21",
            "models": [
                {
                    "name": "azure-gpt-4o-mini",
                    "upstream": "demo-4o-mini",
                    "input_micro_per_mtok": 165_000,
                    "output_micro_per_mtok": 660_000,
                },
                {
                    "name": "azure-embed-small",
                    "kind": "embedding",
                    "upstream": "demo-embed-small",
                    "input_micro_per_mtok": 22_000,
                    "output_micro_per_mtok": 0,
                },
            ],
        },
        {
            "name": "stub-bedrock",
            "kind": "bedrock",
            "base_url": stub_url,
            "region": "us-east-1",
            "models": [
                {
                    "name": "bedrock-haiku",
                    "upstream": "anthropic.claude-3-5-haiku-20241022-v1:0",
                    "input_micro_per_mtok": 800_000,
                    "output_micro_per_mtok": 4_000_000,
                    "cached_input_micro_per_mtok": 80_000,
                    "cache_write_micro_per_mtok": 1_000_000,
                }
            ],
        },
        {
            "name": "stub-gemini",
            "kind": "gemini",
            "base_url": stub_url,
            "models": [
                {
                    "name": "gemini-2.5-flash",
                    "input_micro_per_mtok": 300_000,
                    "output_micro_per_mtok": 2_500_000,
                    "cached_input_micro_per_mtok": 75_000,
                }
            ],
        },
        {
            "name": "stub-vertex",
            "kind": "vertex",
            "base_url": stub_url,
            "project": "demo",
            "region": "us-central1",
            "models": [
                {
                    "name": "vertex-gemini-flash",
                    "upstream": "gemini-2.5-flash",
                    "input_micro_per_mtok": 300_000,
                    "output_micro_per_mtok": 2_500_000,
                    "cached_input_micro_per_mtok": 75_000,
                }
            ],
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
        stub_url = options["stub_url"].rstrip("/")
        for profile in profiles_bootstrap(spec=demo_profiles(stub_url)):
            keyless = profile.kind in ("fake", "direct_http")
            if not keyless and not profile.api_key_last4:
                profile_set_platform_key(
                    profile=profile, api_key=demo_platform_key(profile.kind, stub_url)
                )
                profile.save()
        pooled = ProviderProfile.objects.get(name="stub-openai-pooled")
        for label, weight in DEMO_POOL_KEYS:
            if not pooled.platform_keys.filter(label=label).exists():
                platform_key_add(
                    profile=pooled,
                    label=label,
                    api_key=f"{STUB_PLATFORM_KEY}-{label}",
                    weight=weight,
                    rpm=10_000,
                )
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
