"""Writes of tenants: accounts, groups, virtual keys, tenant tokens, provisioning."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts.models import Account, ApiKey, Group, Membership, TenantToken
from accounts.secrets import TENANT_TOKEN_PREFIX, VIRTUAL_KEY_PREFIX, mint_secret
from core import bus
from core.money import gateway_rate_micro_per_gb


def account_create(
    *,
    name: str,
    billing_mode: str = Account.BillingMode.PREPAID,
) -> Account:
    return Account.objects.create(name=name, billing_mode=billing_mode)


def group_create(
    *,
    account: Account,
    name: str,
    budget_max_micro: int | None = None,
    rpm_limit: int | None = None,
    tpm_limit: int | None = None,
    concurrency_limit: int | None = None,
) -> Group:
    return Group.objects.create(
        account=account,
        name=name,
        budget_max_micro=budget_max_micro,
        rpm_limit=rpm_limit,
        tpm_limit=tpm_limit,
        concurrency_limit=concurrency_limit,
        bandwidth_micro_usd_per_gb=account_bandwidth_rate_micro(account=account),
    )


def account_bandwidth_rate_micro(*, account: Account) -> int:
    """Return the group gateway rate: floor(customer price / markup)."""
    return gateway_rate_micro_per_gb(
        price_micro_per_gb=account.bandwidth_price_micro_per_gb, markup_bp=account.markup_bp
    )


def api_key_create(
    *,
    group: Group,
    name: str = "",
    expires_at: datetime | None = None,
    allowed_models: list[str] | None = None,
    budget_max_micro: int | None = None,
    rpm_limit: int | None = None,
    tpm_limit: int | None = None,
) -> tuple[ApiKey, str]:
    """Create a virtual key; the secret is returned here and never again."""
    secret, key_hash, prefix = mint_secret(VIRTUAL_KEY_PREFIX)
    api_key = ApiKey.objects.create(
        group=group,
        name=name,
        prefix=prefix,
        key_hash=key_hash,
        expires_at=expires_at,
        allowed_models=allowed_models or [],
        budget_max_micro=budget_max_micro,
        rpm_limit=rpm_limit,
        tpm_limit=tpm_limit,
    )
    return api_key, secret


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revoke a key and evict it from every replica's auth cache."""
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    bus.publish(bus.Topic.API_KEY, {"key_hash": api_key.key_hash})
    return api_key


def api_key_changed(*, api_key: ApiKey) -> None:
    """Tell every replica a key's limits, models or expiry changed."""
    bus.publish(bus.Topic.API_KEY, {"key_hash": api_key.key_hash})


def group_changed(*, group: Group) -> None:
    """Tell every replica a group's limits changed: its keys' cached contexts are stale."""
    bus.publish(bus.Topic.GROUP, {"group_id": group.pk})


def tenant_token_create(*, user) -> tuple[TenantToken, str]:
    secret, token_hash, prefix = mint_secret(TENANT_TOKEN_PREFIX)
    token = TenantToken.objects.create(user=user, prefix=prefix, token_hash=token_hash)
    return token, secret


@dataclass(frozen=True)
class ProvisionedTenant:
    account: Account
    group: Group
    api_key: ApiKey
    api_key_secret: str
    api_token_secret: str
    username: str

    def as_json(self) -> dict:
        return {
            "account_id": self.account.pk,
            "group_id": self.group.pk,
            "api_key_id": self.api_key.pk,
            "api_key": self.api_key_secret,
            "api_token": self.api_token_secret,
            "username": self.username,
            "billing_mode": self.account.billing_mode,
        }


@transaction.atomic
def tenant_provision(
    *,
    name: str,
    budget_max_micro: int | None = None,
    wallet_micro: int = 0,
    invoiced: bool = False,
) -> ProvisionedTenant:
    """Create an account, its owner with a tenant token, a group, a key and a wallet."""
    from billing.services import wallet_open

    account = account_create(
        name=name,
        billing_mode=Account.BillingMode.INVOICED if invoiced else Account.BillingMode.PREPAID,
    )
    username = f"{name}-owner"
    user = get_user_model().objects.create_user(username=username)
    Membership.objects.create(account=account, user=user, role=Membership.Role.OWNER)
    _, token_secret = tenant_token_create(user=user)
    group = group_create(account=account, name="default", budget_max_micro=budget_max_micro)
    api_key, key_secret = api_key_create(group=group, name="default")
    wallet_open(account=account, opening_micro=wallet_micro)
    return ProvisionedTenant(
        account=account,
        group=group,
        api_key=api_key,
        api_key_secret=key_secret,
        api_token_secret=token_secret,
        username=username,
    )


def group_update(*, group: Group, **fields) -> Group:
    """Change a group's budget or limits and tell every replica."""
    for name, value in fields.items():
        setattr(group, name, value)
    group.save(update_fields=list(fields) or None)
    group_changed(group=group)
    return group
