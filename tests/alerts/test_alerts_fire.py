"""Tenant alerts in process: rules evaluated against the counters settlement keeps (charges
stored as a gateway's usage rows), fired once per period and threshold, sent signed to a real
receiver and by Django's SMTP backend to a real SMTP server, retried with backoff."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from accounts.models import Account, Group, Membership
from alerts import services
from alerts.delivery import deliveries_send
from alerts.evaluate import rules_evaluate
from alerts.models import AlertAttempt, AlertDelivery, AlertFiring, AlertRule
from billing.models import TagBudget, TagSpend, Wallet
from tests.billing.test_budget_periods import spend, with_period
from tests.support.tenants import make_tenant
from tests.usage.test_events import SECRET, webhook  # noqa: F401 (the receiver fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def fired(rule: AlertRule) -> list[tuple]:
    return list(
        AlertFiring.objects.filter(rule=rule)
        .order_by("id")
        .values_list("period", "threshold", "value_micro", "limit_micro")
    )


def hook_for(tenant, receiver):
    account = Account.objects.get(pk=tenant.account_id)
    hook, secret = services.alert_webhook_create(account=account, url=receiver.url)
    receiver.secret = secret
    return hook


def test_a_group_rule_fires_each_threshold_exactly_once_per_period():
    tenant = make_tenant(budget_micro=1_000)
    with_period(Group, tenant.group_id, period="daily")
    account = Account.objects.get(pk=tenant.account_id)
    rule = services.alert_rule_create(
        account=account, scope="group", group=Group.objects.get(pk=tenant.group_id)
    )
    day = Group.objects.get(pk=tenant.group_id)
    period = day.period_starts_at.isoformat().replace("+00:00", "Z")

    spend(tenant, 499)
    assert rules_evaluate() == [] and fired(rule) == []
    spend(tenant, 1)  # 500 of 1,000: exactly 50%
    assert len(rules_evaluate()) == 1
    assert rules_evaluate() == []  # still at 50%: nothing new
    spend(tenant, 300)  # 800: 80%
    spend(tenant, 250)  # 1,050: 100% too
    rules_evaluate()
    rules_evaluate()
    assert fired(rule) == [
        (period, "pct:50", 500, 1_000),
        (period, "pct:80", 1_050, 1_000),
        (period, "pct:100", 1_050, 1_000),
    ]

    # The next day (an injected clock): the roll starts a new period; 50% fires again in it.
    tomorrow = day.period_ends_at + timedelta(minutes=1)
    from billing.services import budget_periods_roll

    assert rules_evaluate(now=tomorrow) == []  # the ended period reads 0 until it rolls
    budget_periods_roll(now=tomorrow)
    spend(tenant, 600)
    new = Group.objects.get(pk=tenant.group_id)
    assert new.period_starts_at == day.period_ends_at
    assert len(rules_evaluate(now=tomorrow)) == 1
    assert fired(rule)[-1] == (
        new.period_starts_at.isoformat().replace("+00:00", "Z"),
        "pct:50",
        600,
        1_000,
    )
    assert len(fired(rule)) == 4


def test_key_account_and_amount_rules_read_their_own_counters():
    tenant = make_tenant(budget_micro=10_000)
    account = Account.objects.get(pk=tenant.account_id)
    from accounts.models import ApiKey

    ApiKey.objects.filter(pk=tenant.api_key_id).update(budget_max_micro=400)
    key_rule = services.alert_rule_create(
        account=account,
        scope="key",
        api_key=ApiKey.objects.get(pk=tenant.api_key_id),
        threshold_pcts=[90],
    )
    account_rule = services.alert_rule_create(account=account, scope="account", amount_micro=350)
    spend(tenant, 360)  # key 90% of 400; the account spent 360 >= 350
    rules_evaluate()
    month = timezone.now().strftime("%Y-%m")
    assert fired(key_rule) == [("all", "pct:90", 360, 400)]
    assert fired(account_rule) == [(month, "amount:350", 360, 350)]


def test_a_tag_rule_reads_the_tags_spend_of_its_period():
    tenant = make_tenant()
    account = Account.objects.get(pk=tenant.account_id)
    TagBudget.objects.create(account=account, tag="team:search", budget_max_micro=2_000)
    rule = services.alert_rule_create(account=account, scope="tag", tag="team:search")
    month = timezone.now().strftime("%Y-%m")
    TagSpend.objects.create(account=account, tag="team:search", period=month, spent_micro=999)
    assert rules_evaluate() == []
    TagSpend.objects.filter(account=account).update(spent_micro=1_000)
    rules_evaluate()
    assert fired(rule) == [(month, "pct:50", 1_000, 2_000)]


def test_a_wallet_rule_fires_once_per_crossing_and_again_after_a_top_up():
    tenant = make_tenant(wallet_micro=10_000)
    account = Account.objects.get(pk=tenant.account_id)
    rule = services.alert_rule_create(account=account, scope="wallet", amount_micro=5_000)
    Wallet.objects.filter(account=account).update(balance_micro=4_999)
    rules_evaluate()
    rules_evaluate()
    Wallet.objects.filter(account=account).update(balance_micro=100)
    rules_evaluate()
    assert fired(rule) == [("1", "below:5000", 4_999, 5_000)]
    Wallet.objects.filter(account=account).update(balance_micro=5_000)  # back at the floor
    rules_evaluate()
    Wallet.objects.filter(account=account).update(balance_micro=4_000)
    rules_evaluate()
    assert fired(rule)[1:] == [("2", "below:5000", 4_000, 5_000)]


def test_a_receiver_answering_500_then_200_is_retried_with_backoff_and_both_are_logged(
    receiver,
):
    tenant = make_tenant(budget_micro=1_000)
    endpoint = receiver(500)
    hook = hook_for(tenant, endpoint)
    account = Account.objects.get(pk=tenant.account_id)
    services.alert_rule_create(
        account=account,
        scope="group",
        group=Group.objects.get(pk=tenant.group_id),
        threshold_pcts=[50],
    )
    spend(tenant, 500)
    [firing] = rules_evaluate()
    now = timezone.now()

    first = deliveries_send(now=now)
    assert (first.retrying, first.delivered) == (1, 1)  # the webhook, and the operator's sink
    # The first retry waits TOLLGATE_ALERT_RETRY_BASE_S (30 s): not due a second early.
    assert deliveries_send(now=now + timedelta(seconds=29)).retrying == 0
    second = deliveries_send(now=now + timedelta(seconds=30))
    assert second.delivered == 1
    assert deliveries_send(now=now + timedelta(hours=1)).delivered == 0

    [delivery] = AlertDelivery.objects.filter(webhook=hook)
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 2, 200)
    tries = AlertAttempt.objects.filter(delivery=delivery)
    assert [(t.number, t.status_code, t.error) for t in tries] == [
        (1, 500, "the webhook answered 500"),
        (2, 200, ""),
    ]
    assert [(r.event_id, r.signed, r.status) for r in endpoint.received] == [
        (firing.public_id, True, 500),
        (firing.public_id, True, 200),
    ]
    body = orjson.loads(endpoint.received[1].body)
    assert body == firing.payload
    assert {k: body[k] for k in ("type", "scope", "group_id", "threshold", "value_micro")} == {
        "type": "alert.threshold",
        "scope": "group",
        "group_id": tenant.group_id,
        "threshold": {"kind": "pct", "value": 50},
        "value_micro": 500,
    }


def test_a_4xx_fails_at_once_and_a_dead_receiver_keeps_retrying(receiver):
    tenant = make_tenant(budget_micro=1_000)
    refusing = hook_for(tenant, receiver(404))
    account = Account.objects.get(pk=tenant.account_id)
    dead, _ = services.alert_webhook_create(account=account, url="http://127.0.0.1:9/x")
    services.alert_rule_create(account=account, scope="wallet", amount_micro=10**12)
    rules_evaluate()
    report = deliveries_send()
    assert (report.failed, report.retrying, report.delivered) == (1, 1, 1)  # 1: the sink
    assert AlertDelivery.objects.get(webhook=refusing).state == "failed"
    gone = AlertDelivery.objects.get(webhook=dead)
    assert (gone.state, gone.last_status_code) == ("pending", None)
    assert gone.last_error == "ConnectError posting to the webhook"


def test_alert_email_goes_through_djangos_smtp_backend_to_the_recipients(smtp):
    tenant = make_tenant(budget_micro=1_000)
    account = Account.objects.get(pk=tenant.account_id)
    owner = Membership.objects.filter(account=account).first().user
    owner.email = "owner@example.com"
    owner.save(update_fields=["email"])
    services.alert_rule_create(
        account=account,
        scope="group",
        group=Group.objects.get(pk=tenant.group_id),
        name="prod budget",
        threshold_pcts=[80],
        emails=["ops@example.com"],
        email_managers=True,
    )
    spend(tenant, 800)
    rules_evaluate()
    with override_settings(
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=smtp.port,
        DEFAULT_FROM_EMAIL="alerts@tollgate.example",
    ):
        assert deliveries_send().delivered == 2  # the email, and the operator's sink
    [(recipients, message)] = smtp.messages
    assert recipients == ["ops@example.com", "owner@example.com"]
    assert message["From"] == "alerts@tollgate.example"
    subject = " ".join(message["Subject"].split())  # unfolded
    assert subject == "[Tollgate] prod budget (group): reached 80% of its budget, now $0.0008"
    assert "value_micro: 800" in message.get_payload()
    delivery = AlertDelivery.objects.get(channel="email")
    assert (delivery.state, delivery.attempts) == ("delivered", 1)


def test_the_operators_sink_receives_every_firing_signed_and_tenants_never_see_it(webhook):  # noqa: F811
    from core.sinks import signature

    sink = webhook(200)
    tenant = make_tenant(budget_micro=1_000)
    account = Account.objects.get(pk=tenant.account_id)
    services.alert_rule_create(
        account=account, scope="group", group=Group.objects.get(pk=tenant.group_id)
    )
    spend(tenant, 800)
    firings = rules_evaluate()
    assert len(firings) == 2  # 50% and 80%, no webhook or email of the tenant's
    with override_settings(
        TOLLGATE={**settings.TOLLGATE, "USAGE_SINK_URL": sink.url, "USAGE_SINK_SECRET": SECRET}
    ):
        assert deliveries_send().delivered == 2
    assert sorted(orjson.loads(body)["threshold"]["value"] for _, body in sink.received) == [
        50,
        80,
    ]
    for headers, body in sink.received:
        assert headers["x-tollgate-signature"] == signature(body, secret=SECRET)
    assert set(AlertDelivery.objects.values_list("channel", flat=True)) == {"sink"}
