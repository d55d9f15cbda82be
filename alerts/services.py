"""Alert rules' and webhooks' writes (audited), and a webhook's test send.

A webhook's secret is made here, returned once to its creator, and kept sealed under the
master key bound to its row (core/sealing.py): Tollgate needs it to sign every delivery.
The trail records a webhook by URL and secret prefix, never the secret.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.models import Account
from alerts.channels import check_url
from alerts.models import AlertDelivery, AlertRule, AlertWebhook
from audit import services as audit
from audit.actors import Actor
from core.sealing import seal
from core.sinks import rfc3339
from core.webhook_signing import new_secret

RULE_AUDITED = (
    "name",
    "scope",
    "group_id",
    "api_key_id",
    "tag",
    "threshold_pcts",
    "amount_micro",
    "emails",
    "email_managers",
    "enabled",
)
WEBHOOK_AUDITED = ("url", "description", "enabled", "secret_prefix")
TEST_TYPE = "alert.test"


def _rule_audited(rule: AlertRule) -> dict:
    return {name: getattr(rule, name) for name in RULE_AUDITED}


def _hook_audited(hook: AlertWebhook) -> dict:
    return {name: getattr(hook, name) for name in WEBHOOK_AUDITED}


def _record(action: str, row, *, actor: Actor | None, before: dict, after: dict) -> None:
    audit.record(
        actor=actor,
        action=action,
        account_id=row.account_id,
        target_type=action.split(".")[0],
        target_id=row.pk,
        target_label=str(row),
        before=before,
        after=after,
    )


def _save_changed(row, fields: dict, action: str, audited, *, actor: Actor | None):
    """Set `fields` on `row`, save it and record what changed on the audit trail."""
    before = audited(row)
    for name, value in fields.items():
        setattr(row, name, value)
    with transaction.atomic():
        row.save()
        audit.record_change(
            actor=actor,
            action=action,
            account_id=row.account_id,
            target_type=action.split(".")[0],
            target_id=row.pk,
            target_label=str(row),
            before=before,
            after=audited(row),
        )
    return row


def alert_rule_create(*, account: Account, actor: Actor | None = None, **fields) -> AlertRule:
    rule = AlertRule(account=account, **fields)
    with transaction.atomic():
        rule.save()
        _record("alert_rule.create", rule, actor=actor, before={}, after=_rule_audited(rule))
    return rule


def alert_rule_update(*, rule: AlertRule, actor: Actor | None = None, **fields) -> AlertRule:
    return _save_changed(rule, fields, "alert_rule.update", _rule_audited, actor=actor)


def alert_rule_delete(*, rule: AlertRule, actor: Actor | None = None) -> None:
    with transaction.atomic():
        _record("alert_rule.delete", rule, actor=actor, before=_rule_audited(rule), after={})
        rule.delete()


def _seal_new_secret(hook: AlertWebhook) -> str:
    secret = new_secret()
    hook.secret_sealed, hook.secret_version = seal(secret, bound_to=hook.bound_to())
    hook.secret_prefix = secret[:12]
    hook.save(update_fields=["secret_sealed", "secret_version", "secret_prefix"])
    return secret


def alert_webhook_create(
    *, account: Account, url: str, description: str = "", actor: Actor | None = None
) -> tuple[AlertWebhook, str]:
    """Add a webhook (its URL must reach a public address); return it and its secret,
    which is never shown again."""
    check_url(url)
    with transaction.atomic():
        hook = AlertWebhook.objects.create(
            account=account, url=url, description=description, secret_sealed=b""
        )
        secret = _seal_new_secret(hook)
        _record("alert_webhook.create", hook, actor=actor, before={}, after=_hook_audited(hook))
    return hook, secret


def alert_webhook_update(
    *, hook: AlertWebhook, actor: Actor | None = None, **fields
) -> AlertWebhook:
    if "url" in fields:
        check_url(fields["url"])
    return _save_changed(hook, fields, "alert_webhook.update", _hook_audited, actor=actor)


def alert_webhook_rotate(*, hook: AlertWebhook, actor: Actor | None = None) -> str:
    """Give the webhook a new secret at once (returned once); the old one stops signing."""
    before = _hook_audited(hook)
    with transaction.atomic():
        secret = _seal_new_secret(hook)
        _record("alert_webhook.rotate", hook, actor=actor, before=before, after=_hook_audited(hook))
    return secret


def alert_webhook_delete(*, hook: AlertWebhook, actor: Actor | None = None) -> None:
    with transaction.atomic():
        _record("alert_webhook.delete", hook, actor=actor, before=_hook_audited(hook), after={})
        hook.delete()


def alert_webhook_test(*, hook: AlertWebhook, actor: Actor | None = None) -> AlertDelivery:
    """Queue a test event for the webhook, sent and logged like a real one."""
    now = timezone.now()
    with transaction.atomic():
        delivery = AlertDelivery.objects.create(
            account_id=hook.account_id,
            webhook=hook,
            channel=AlertDelivery.Channel.WEBHOOK,
            event_id="",
            payload={},
            next_attempt_at=now,
            created_at=now,
        )
        delivery.event_id = f"alerttest_{delivery.pk}"
        delivery.payload = {
            "type": TEST_TYPE,
            "id": delivery.event_id,
            "account_id": hook.account_id,
            "summary": "A test alert: this webhook receives Tollgate's alerts.",
            "created_at": rfc3339(now),
        }
        delivery.save(update_fields=["event_id", "payload"])
        _record("alert_webhook.test", hook, actor=actor, before={}, after={"url": hook.url})
    transaction.on_commit(_kick)
    return delivery


def _kick() -> None:
    from alerts.tasks import kick

    kick()
