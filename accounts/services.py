"""Writes of tenants: accounts, groups, virtual keys, tenant tokens, billing settings."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from accounts.models import Account, ApiKey, Group, TenantToken
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


def group_update(*, group: Group, **fields) -> Group:
    """Change a group's budget or limits and tell every replica."""
    for name, value in fields.items():
        setattr(group, name, value)
    group.save(update_fields=list(fields) or None)
    group_changed(group=group)
    return group


def account_billing_changed(*, account: Account) -> int:
    """Push floor(customer price / markup) to every group of the account; return the rate."""
    rate = account_bandwidth_rate_micro(account=account)
    groups = list(Group.objects.filter(account=account))
    Group.objects.filter(account=account).update(bandwidth_micro_usd_per_gb=rate)
    for group in groups:
        group_changed(group=group)
    return rate


def account_billing_update(*, account: Account, price_micro_per_gb: int, markup_bp: int) -> int:
    if price_micro_per_gb < 0 or markup_bp < 1:
        raise ValueError("price must be >= 0 and markup >= 1 basis point")
    account.bandwidth_price_micro_per_gb = price_micro_per_gb
    account.markup_bp = markup_bp
    account.save(update_fields=["bandwidth_price_micro_per_gb", "markup_bp"])
    return account_billing_changed(account=account)
