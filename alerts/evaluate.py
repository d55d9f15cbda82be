"""Evaluate the enabled rules against the counters of record and record what fired.

Run by beat every TOLLGATE_ALERTS_S seconds (alerts/tasks.py). A spend threshold fires once
per rule, period and threshold: AlertFiring's unique row says so, so two workers evaluating
at once, or a threshold still reached a minute later, add nothing; the next period fires it
again. A wallet rule fires once per crossing below its floor and is re-armed when the
balance is back at or above it. Each firing makes one pending delivery per enabled webhook
of the account and one for the rule's email recipients.

What is read (billing's and accounts' own counters, never the request path):
- group / key: its spent in its current budget period (`period_spent_micro`) against its
  budget; the period is the row's period start ("all" without a period);
- tag: the tag's TagSpend of the current period against its TagBudget (monthly when the tag
  has no budget and the rule is an amount);
- account: its groups' spent in their current periods together, against their budgets
  together (groups without a budget add none); the period is the account's calendar month;
- wallet: the wallet's balance (balance_micro).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Account, Membership
from accounts.periods import period_key
from alerts.models import AlertDelivery, AlertFiring, AlertRule, AlertWebhook
from alerts.thresholds import reached, wallet_step
from billing.models import TagBudget, TagSpend, Wallet
from core.money import format_usd_exact
from core.sinks import rfc3339

ALERT_TYPE = "alert.threshold"


@dataclass(frozen=True, slots=True)
class Reading:
    value_micro: int
    budget_micro: int | None
    period: str


def _period_of(row, now: datetime) -> str:
    if row.period_starts_at is None or row.budget_period == "none":
        return "all"
    if row.period_ends_at is not None and row.period_ends_at <= now:
        return "ended"  # spent reads 0 until the roll: nothing can fire in it
    return rfc3339(row.period_starts_at)


def reading(rule: AlertRule, account: Account, now: datetime) -> Reading | None:
    """Return what a spend rule compares now, or None when what it names is gone."""
    if rule.scope == AlertRule.Scope.GROUP and rule.group is not None:
        group = rule.group
        return Reading(
            group.period_spent_micro(now), group.budget_max_micro, _period_of(group, now)
        )
    if rule.scope == AlertRule.Scope.KEY and rule.api_key is not None:
        key = rule.api_key
        return Reading(key.period_spent_micro(now), key.budget_max_micro, _period_of(key, now))
    if rule.scope == AlertRule.Scope.TAG:
        budget = TagBudget.objects.filter(account=account, tag=rule.tag).first()
        period = period_key(budget.budget_period if budget else "monthly", account.time_zone, now)
        spend = TagSpend.objects.filter(account=account, tag=rule.tag, period=period).first()
        return Reading(
            spend.spent_micro if spend else 0,
            budget.budget_max_micro if budget else None,
            period,
        )
    if rule.scope == AlertRule.Scope.ACCOUNT:
        groups = list(account.groups.all())
        budgets = [g.budget_max_micro for g in groups if g.budget_max_micro is not None]
        return Reading(
            sum(g.period_spent_micro(now) for g in groups),
            sum(budgets) if budgets else None,
            period_key("monthly", account.time_zone, now),
        )
    return None


def _subject(rule: AlertRule) -> dict:
    subject: dict = {"scope": rule.scope, "account_id": rule.account_id}
    if rule.group_id is not None:
        subject["group_id"] = rule.group_id
    if rule.api_key_id is not None:
        subject["api_key_id"] = rule.api_key_id
    if rule.tag:
        subject["tag"] = rule.tag
    return subject


def _summary(rule: AlertRule, threshold: str, value_micro: int) -> str:
    kind, _, amount = threshold.partition(":")
    what = {
        "pct": f"reached {amount}% of its budget",
        "amount": f"spent {format_usd_exact(int(amount))} or more",
        "below": f"balance below {format_usd_exact(int(amount))}",
    }[kind]
    target = rule.tag if rule.scope == AlertRule.Scope.TAG else rule.scope
    return f"{rule.name or rule.public_id} ({target}): {what}, now {format_usd_exact(value_micro)}"


def recipients_of(rule: AlertRule) -> list[str]:
    """The rule's addresses and, when it says so, its account's owners' and admins'."""
    found = list(rule.emails)
    if rule.email_managers:
        found += [
            email
            for email in Membership.objects.filter(
                account_id=rule.account_id,
                role__in=(Membership.Role.OWNER, Membership.Role.ADMIN),
                user__is_active=True,
            )
            .exclude(user__email="")
            .order_by("user__email")
            .values_list("user__email", flat=True)
        ]
    return list(dict.fromkeys(found))


def _fire(
    rule: AlertRule, *, period: str, threshold: str, value: int, limit: int | None, now: datetime
) -> AlertFiring | None:
    """Record the firing once and queue its deliveries; None when it fired already."""
    try:
        with transaction.atomic():
            firing = AlertFiring.objects.create(
                rule=rule,
                period=period,
                threshold=threshold,
                value_micro=value,
                limit_micro=limit,
                payload={},
                created_at=now,
            )
            kind, _, amount = threshold.partition(":")
            firing.payload = {
                "type": ALERT_TYPE,
                "id": firing.public_id,
                "rule_id": rule.public_id,
                "rule_name": rule.name,
                **_subject(rule),
                "period": period,
                "threshold": {"kind": kind, "value": int(amount)},
                "value_micro": value,
                "limit_micro": limit,
                "summary": _summary(rule, threshold, value),
                "created_at": rfc3339(now),
            }
            firing.save(update_fields=["payload"])
            queue_deliveries(firing=firing, rule=rule, now=now)
    except IntegrityError:
        return None
    return firing


def queue_deliveries(*, firing: AlertFiring, rule: AlertRule, now: datetime) -> int:
    webhooks = AlertWebhook.objects.filter(account_id=rule.account_id, enabled=True)
    rows = [
        AlertDelivery(
            account_id=rule.account_id,
            firing=firing,
            webhook=hook,
            channel=AlertDelivery.Channel.WEBHOOK,
            event_id=firing.public_id,
            payload=firing.payload,
            next_attempt_at=now,
            created_at=now,
        )
        for hook in webhooks.order_by("id")
    ]
    recipients = recipients_of(rule)
    if recipients:
        rows.append(
            AlertDelivery(
                account_id=rule.account_id,
                firing=firing,
                channel=AlertDelivery.Channel.EMAIL,
                recipients=recipients,
                event_id=firing.public_id,
                payload=firing.payload,
                next_attempt_at=now,
                created_at=now,
            )
        )
    rows.append(  # the operator's sink receives every firing, as it does spend alerts
        AlertDelivery(
            account_id=rule.account_id,
            firing=firing,
            channel=AlertDelivery.Channel.SINK,
            event_id=firing.public_id,
            payload=firing.payload,
            next_attempt_at=now,
            created_at=now,
        )
    )
    AlertDelivery.objects.bulk_create(rows)
    return len(rows)


def _wallet(rule: AlertRule, now: datetime) -> list[AlertFiring]:
    wallet = Wallet.objects.filter(account_id=rule.account_id).first()
    if wallet is None or rule.amount_micro is None:
        return []
    with transaction.atomic():
        locked = AlertRule.objects.select_for_update().get(pk=rule.pk)
        fire, armed = wallet_step(
            balance_micro=wallet.balance_micro,
            floor_micro=rule.amount_micro,
            armed=locked.wallet_armed,
        )
        fired = []
        if fire:
            locked.wallet_crossings += 1
            firing = _fire(
                locked,
                period=str(locked.wallet_crossings),
                threshold=f"below:{rule.amount_micro}",
                value=wallet.balance_micro,
                limit=rule.amount_micro,
                now=now,
            )
            fired = [firing] if firing else []
        if armed != locked.wallet_armed or fire:
            locked.wallet_armed = armed
            locked.save(update_fields=["wallet_armed", "wallet_crossings"])
    return fired


def rules_enabled() -> QuerySet[AlertRule]:
    return AlertRule.objects.filter(enabled=True).select_related("account", "group", "api_key")


def rule_evaluate(rule: AlertRule, *, now: datetime) -> list[AlertFiring]:
    """Fire what this rule reached now that it had not fired in this period."""
    if rule.scope == AlertRule.Scope.WALLET:
        return _wallet(rule, now)
    found = reading(rule, rule.account, now)
    if found is None or found.period == "ended":
        return []
    fired = []
    for threshold, limit in reached(
        spent_micro=found.value_micro,
        budget_micro=found.budget_micro,
        pcts=rule.threshold_pcts,
        amount_micro=rule.amount_micro,
    ):
        if AlertFiring.objects.filter(rule=rule, period=found.period, threshold=threshold).exists():
            continue
        firing = _fire(
            rule,
            period=found.period,
            threshold=threshold,
            value=found.value_micro,
            limit=limit,
            now=now,
        )
        if firing is not None:
            fired.append(firing)
    return fired


def rules_evaluate(*, now: datetime | None = None) -> list[AlertFiring]:
    """Evaluate every enabled rule; return the firings recorded now."""
    now = now or timezone.now()
    fired: list[AlertFiring] = []
    for rule in rules_enabled().order_by("id").iterator():
        fired += rule_evaluate(rule, now=now)
    return fired
