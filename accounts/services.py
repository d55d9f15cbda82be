"""Writes of tenants: accounts, groups, virtual keys, tenant tokens, billing settings."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from accounts.models import (
    DEFAULT_CACHE_TTL_S,
    Account,
    ApiKey,
    CacheMode,
    CacheScope,
    Group,
    Period,
    validate_alert_pcts,
    validate_time_zone,
)
from accounts.periods import period_bounds
from accounts.secrets import VIRTUAL_KEY_PREFIX, mint_secret
from audit import services as audit
from audit.actors import Actor
from core import bus, response_cache
from core.money import gateway_rate_micro_per_gb

# What the audit trail records of a group and of a key (audit/services.py): settings,
# never the money counters the ledger moves, never a key's hash.
GROUP_AUDITED = (
    "name",
    "budget_max_micro",
    "budget_period",
    "period_starts_at",
    "period_ends_at",
    "rpm_limit",
    "tpm_limit",
    "concurrency_limit",
    "caller_rpm_limit",
    "caller_tpm_limit",
    "caller_budget_max_micro",
    "web_units_per_day",
    "bandwidth_micro_usd_per_gb",
    "cache_mode",
    "cache_ttl_s",
    "cache_scope",
    "default_tags",
)
KEY_AUDITED = (
    "name",
    "prefix",
    "group_id",
    "expires_at",
    "revoked_at",
    "allowed_models",
    "budget_max_micro",
    "budget_period",
    "period_starts_at",
    "period_ends_at",
    "rpm_limit",
    "tpm_limit",
    "cache_mode",
    "cache_ttl_s",
    "cache_scope",
    "default_tags",
)
ACCOUNT_AUDITED = (
    "name",
    "billing_mode",
    "bandwidth_price_micro_per_gb",
    "markup_bp",
    "time_zone",
    "budget_alert_pcts",
    "directory_roles",
    "trace_content",
)


def audited(row: object, fields: tuple[str, ...]) -> dict:
    """The audited fields of a row, as the trail records them."""
    return {name: getattr(row, name) for name in fields}


def record_group(group: Group, *, action: str, actor: Actor | None, before: dict | None) -> None:
    """Record a group created (before None) or changed (only what differs)."""
    if before is None:
        audit.record(
            actor=actor,
            action=action,
            account_id=group.account_id,
            target_type="group",
            target_id=group.pk,
            target_label=group.name,
            after=audited(group, GROUP_AUDITED),
        )
        return
    audit.record_change(
        actor=actor,
        action=action,
        account_id=group.account_id,
        target_type="group",
        target_id=group.pk,
        target_label=group.name,
        before=before,
        after=audited(group, GROUP_AUDITED),
    )


def record_key(api_key: ApiKey, *, action: str, actor: Actor | None, before: dict | None) -> None:
    """Record a key created (before None) or changed: by prefix and name, never its hash."""
    target: audit.Target = {
        "actor": actor,
        "account_id": api_key.group.account_id,
        "target_type": "key",
        "target_id": api_key.pk,
        "target_label": f"{api_key.prefix}… {api_key.name}".strip(),
    }
    if before is None:
        audit.record(**target, action=action, after=audited(api_key, KEY_AUDITED))
    else:
        audit.record_change(
            **target, action=action, before=before, after=audited(api_key, KEY_AUDITED)
        )


def account_create(
    *,
    name: str,
    billing_mode: str = Account.BillingMode.PREPAID,
    actor: Actor | None = None,
) -> Account:
    with transaction.atomic():
        account = Account.objects.create(name=name, billing_mode=billing_mode)
        audit.record(
            actor=actor,
            action="account.create",
            account_id=account.pk,
            target_type="account",
            target_id=account.pk,
            target_label=account.name,
            after={"name": name, "billing_mode": billing_mode},
        )
    return account


def group_create(
    *,
    account: Account,
    name: str,
    budget_max_micro: int | None = None,
    rpm_limit: int | None = None,
    tpm_limit: int | None = None,
    concurrency_limit: int | None = None,
    budget_period: str = Period.NONE,
    cache_mode: str = CacheMode.ON_REQUEST,
    cache_ttl_s: int = DEFAULT_CACHE_TTL_S,
    cache_scope: str = CacheScope.ACCOUNT,
    default_tags: list[str] | None = None,
    actor: Actor | None = None,
) -> Group:
    starts, ends = current_period(account=account, budget_period=budget_period)
    with transaction.atomic():
        group = Group.objects.create(
            account=account,
            name=name,
            budget_max_micro=budget_max_micro,
            rpm_limit=rpm_limit,
            tpm_limit=tpm_limit,
            concurrency_limit=concurrency_limit,
            bandwidth_micro_usd_per_gb=account_bandwidth_rate_micro(account=account),
            budget_period=budget_period,
            period_starts_at=starts,
            period_ends_at=ends,
            cache_mode=cache_mode,
            cache_ttl_s=cache_ttl_s,
            cache_scope=cache_scope,
            default_tags=default_tags or [],
        )
        record_group(group, action="group.create", actor=actor, before=None)
    return group


def current_period(
    *, account: Account, budget_period: str, now: datetime | None = None
) -> tuple[datetime | None, datetime | None]:
    """Return the bounds of the period of this kind running now in the account's zone
    (None, None for a budget without a period)."""
    if budget_period not in Period.values:
        raise ValueError(f"budget_period must be one of {', '.join(Period.values)}")
    if budget_period == Period.NONE:
        return None, None
    return period_bounds(budget_period, account.time_zone, now or timezone.now())


def budget_period_set(
    *, target: Group | ApiKey, budget_period: str, now: datetime | None = None
) -> list[str]:
    """Give a group or key a budget period (or none) starting with the current one; return
    the fields changed (the caller saves them).

    Only the bounds move: spent is not reset (that is a ledger step), so what was spent so
    far counts in the first period, which can only refuse earlier, never let more through.
    Choosing the period it already has changes nothing.
    """
    if budget_period == target.budget_period:
        return []
    target.budget_period = budget_period
    return budget_period_start(target=target, now=now)


def budget_period_start(*, target: Group | ApiKey, now: datetime | None = None) -> list[str]:
    """Set a group's or key's period bounds to those of its budget_period running now (the
    admin form sets budget_period itself); return the fields changed."""
    account = target.account if isinstance(target, Group) else target.group.account
    target.period_starts_at, target.period_ends_at = current_period(
        account=account, budget_period=target.budget_period, now=now
    )
    return ["budget_period", "period_starts_at", "period_ends_at"]


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
    budget_period: str = Period.NONE,
    cache_mode: str = "",
    cache_ttl_s: int | None = None,
    cache_scope: str = "",
    default_tags: list[str] | None = None,
    actor: Actor | None = None,
) -> tuple[ApiKey, str]:
    """Create a virtual key; the secret is returned here and never again."""
    starts, ends = current_period(account=group.account, budget_period=budget_period)
    secret, key_hash, prefix = mint_secret(VIRTUAL_KEY_PREFIX)
    with transaction.atomic():
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
            budget_period=budget_period,
            period_starts_at=starts,
            period_ends_at=ends,
            cache_mode=cache_mode,
            cache_ttl_s=cache_ttl_s,
            cache_scope=cache_scope,
            default_tags=default_tags or [],
        )
        record_key(api_key, action="key.create", actor=actor, before=None)
    return api_key, secret


def api_key_revoke(*, api_key: ApiKey, actor: Actor | None = None) -> ApiKey:
    """Revoke a key and evict it from every replica's auth cache."""
    if api_key.revoked_at is None:
        with transaction.atomic():
            api_key.revoked_at = timezone.now()
            api_key.save(update_fields=["revoked_at"])
            audit.record(
                actor=actor,
                action="key.revoke",
                account_id=api_key.group.account_id,
                target_type="key",
                target_id=api_key.pk,
                target_label=f"{api_key.prefix}… {api_key.name}".strip(),
                before={"revoked_at": None},
                after={"revoked_at": api_key.revoked_at},
            )
    bus.publish(bus.Topic.API_KEY, api_key.eviction(), wait=True)
    return api_key


def api_key_changed(*, api_key: ApiKey) -> None:
    """Tell every replica a key's limits, models or expiry changed; returns once they all
    dropped the old ones."""
    bus.publish(bus.Topic.API_KEY, api_key.eviction(), wait=True)


def account_changed(*, account_id: int) -> None:
    """Tell every replica something every key of an account carries changed (its access
    groups, tag budgets, time zone, guardrails): each of its keys' and groups' cached
    principals is stale. Returns once they all dropped them."""
    bus.publish(bus.Topic.GROUP, {"account_id": account_id}, wait=True)


def group_changed(*, group: Group) -> None:
    """Tell every replica a group's limits changed: its keys' cached contexts are stale.
    Returns once they all dropped them."""
    bus.publish(bus.Topic.GROUP, {"group_id": group.pk}, wait=True)


def response_cache_purge(*, account: Account, actor: Actor | None = None) -> int:
    """Drop every cached answer of the account on every replica and record who did; return
    how many the cache Redis held (an embedded run's in-process store is not counted)."""
    purged = response_cache.purge_account(account.pk)
    audit.record(
        actor=actor,
        action="cache.purge",
        account_id=account.pk,
        target_type="account",
        target_id=account.pk,
        target_label=account.name,
        after={"purged": purged},
    )
    return purged


def _budgeted_update(target: Group | ApiKey, fields: dict) -> None:
    """Set a group's or key's fields, its budget period through budget_period_set, and save
    only what changed (the ledger moves the counters meanwhile)."""
    changed = []
    if "budget_period" in fields:
        changed += budget_period_set(target=target, budget_period=fields.pop("budget_period"))
    for name, value in fields.items():
        setattr(target, name, value)
    changed += list(fields)
    if changed:
        target.save(update_fields=changed)


def group_update(*, group: Group, actor: Actor | None = None, **fields) -> Group:
    """Change a group's budget, budget period or limits and tell every replica."""
    before = audited(group, GROUP_AUDITED)
    with transaction.atomic():
        _budgeted_update(group, fields)
        record_group(group, action="group.update", actor=actor, before=before)
    group_changed(group=group)
    return group


def api_key_update(*, api_key: ApiKey, actor: Actor | None = None, **fields) -> ApiKey:
    """Change a key's budget, budget period or limits and tell every replica."""
    before = audited(api_key, KEY_AUDITED)
    with transaction.atomic():
        _budgeted_update(api_key, fields)
        record_key(api_key, action="key.update", actor=actor, before=before)
    api_key_changed(api_key=api_key)
    return api_key


def account_governance_update(
    *,
    account: Account,
    time_zone: str | None = None,
    budget_alert_pcts: list[int] | None = None,
    actor: Actor | None = None,
) -> Account:
    """Set the zone budget periods reset in and the alert thresholds (ValidationError if
    invalid). A new zone applies from each budget's next boundary: the period running now
    keeps the bounds it started with."""
    changed = []
    before = audited(account, ACCOUNT_AUDITED)
    if time_zone is not None:
        validate_time_zone(time_zone)
        account.time_zone = time_zone
        changed.append("time_zone")
    if budget_alert_pcts is not None:
        validate_alert_pcts(budget_alert_pcts)
        account.budget_alert_pcts = sorted(budget_alert_pcts)
        changed.append("budget_alert_pcts")
    if changed:
        with transaction.atomic():
            account.save(update_fields=changed)
            record_account(account, action="account.governance", actor=actor, before=before)
    if time_zone is not None:  # the gateways' tag budget periods follow it (gateway/auth.py)
        account_changed(account_id=account.pk)
    return account


def record_account(
    account: Account, *, action: str, actor: Actor | None, before: dict | None
) -> None:
    """Record an account created with its settings (before None), or what changed of them
    (nothing when nothing did)."""
    target: audit.Target = {
        "actor": actor,
        "account_id": account.pk,
        "target_type": "account",
        "target_id": account.pk,
        "target_label": account.name,
    }
    after = audited(account, ACCOUNT_AUDITED)
    if before is None:
        audit.record(**target, action=action, after=after)
    else:
        audit.record_change(**target, action=action, before=before, after=after)


def account_suspend(*, account: Account, reason: str, actor: Actor | None = None) -> bool:
    """Refuse every key of the account (LM-1004) on every replica before this returns;
    False if it was suspended already."""
    now = timezone.now()
    with transaction.atomic():
        changed = Account.objects.filter(pk=account.pk, suspended_at__isnull=True).update(
            suspended_at=now, suspended_reason=reason[:200]
        )
        if changed:
            audit.record(
                actor=actor,
                action="account.suspend",
                account_id=account.pk,
                target_type="account",
                target_id=account.pk,
                target_label=account.name,
                before={"suspended_at": None, "suspended_reason": ""},
                after={"suspended_at": now, "suspended_reason": reason[:200]},
            )
    _account_changed(account)
    return bool(changed)


def account_resume(*, account: Account, actor: Actor | None = None) -> bool:
    """Serve the account's keys again, on every replica before this returns; False if it
    was not suspended."""
    with transaction.atomic():
        was = (
            Account.objects.select_for_update()
            .filter(pk=account.pk, suspended_at__isnull=False)
            .values("suspended_at", "suspended_reason")
            .first()
        )
        changed = Account.objects.filter(pk=account.pk, suspended_at__isnull=False).update(
            suspended_at=None, suspended_reason=""
        )
        if changed and was is not None:
            audit.record(
                actor=actor,
                action="account.resume",
                account_id=account.pk,
                target_type="account",
                target_id=account.pk,
                target_label=account.name,
                before=was,
                after={"suspended_at": None, "suspended_reason": ""},
            )
    _account_changed(account)
    return bool(changed)


def _account_changed(account: Account) -> None:
    for group in Group.objects.filter(account=account):
        group_changed(group=group)


def account_billing_changed(*, account: Account) -> int:
    """Push floor(customer price / markup) to every group of the account; return the rate."""
    rate = account_bandwidth_rate_micro(account=account)
    groups = list(Group.objects.filter(account=account))
    Group.objects.filter(account=account).update(bandwidth_micro_usd_per_gb=rate)
    for group in groups:
        group_changed(group=group)
    return rate


def account_billing_update(
    *, account: Account, price_micro_per_gb: int, markup_bp: int, actor: Actor | None = None
) -> int:
    if price_micro_per_gb < 0 or markup_bp < 1:
        raise ValueError("price must be >= 0 and markup >= 1 basis point")
    before = audited(account, ACCOUNT_AUDITED)
    with transaction.atomic():
        account.bandwidth_price_micro_per_gb = price_micro_per_gb
        account.markup_bp = markup_bp
        account.save(update_fields=["bandwidth_price_micro_per_gb", "markup_bp"])
        record_account(account, action="account.billing", actor=actor, before=before)
    return account_billing_changed(account=account)
