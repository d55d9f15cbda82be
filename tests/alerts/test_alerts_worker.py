"""Tenant alerts end to end: real requests through a real gateway (the official SDKs) move
the group's spend; a real `celery -A config worker -B` evaluates the rules and delivers each
firing once, signed, to a real receiver (which answers 500 first: retried with backoff,
both tries in the delivery log), by Django's SMTP backend to a real SMTP server, and never
to a dead receiver's cost: requests go on answering 200 while it is down."""

from __future__ import annotations

import orjson
import pytest
from rest_framework.test import APIClient

from accounts.models import Account, Group
from alerts import services
from alerts.models import AlertDelivery, AlertFiring
from tests.support.processes import start_worker
from tests.support.services import requires_redis
from tests.support.waits import wait_until

pytestmark = requires_redis


@pytest.fixture
def alert_worker(stack, tmp_path, smtp):
    worker = start_worker(
        tmp_path,
        "alerts",
        "-B",
        "--purge",
        "--schedule",
        str(tmp_path / "beat-schedule"),
        TOLLGATE_ALERTS_S="1",
        TOLLGATE_ALERT_RETRY_BASE_S="1",
        TOLLGATE_WEB_ALLOW_NETS="127.0.0.1/32",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp.port),
        DEFAULT_FROM_EMAIL="alerts@tollgate.example",
    )
    yield worker
    worker.stop()


def runs(worker) -> int:
    return worker.log().count("Task alerts.run[") // 2  # received, then succeeded


def spent(tenant) -> int:
    return Group.objects.get(pk=tenant.group_id).spent_micro


def ask(stack, tenant, *, stream: bool = False) -> None:
    client = stack.openai(tenant)
    messages = [{"role": "user", "content": "one two"}]
    if stream:
        chunks = list(
            client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
        )
        assert chunks
    else:
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        assert reply.choices[0].message.content


def test_spend_through_the_gateway_fires_once_and_reaches_webhook_and_email(
    stack, alert_worker, receiver, smtp
):
    tenant = stack.tenant()
    account = Account.objects.get(pk=tenant.account_id)
    endpoint = receiver(500)  # the first try fails: the worker retries a second later
    with_receiver = services.alert_webhook_create(account=account, url=endpoint.url)
    hook, endpoint.secret = with_receiver
    dead, _ = services.alert_webhook_create(account=account, url="http://127.0.0.1:9/gone")

    ask(stack, tenant)
    one = wait_until(lambda: spent(tenant), what="the first request's spend")
    # Thresholds at exact multiples of one request's spend (the stub answers alike).
    Group.objects.filter(pk=tenant.group_id).update(budget_max_micro=4 * one)
    group = Group.objects.get(pk=tenant.group_id)
    pct_rule = services.alert_rule_create(
        account=account, scope="group", group=group, threshold_pcts=[50, 100]
    )
    amount_rule = services.alert_rule_create(
        account=account,
        scope="group",
        group=group,
        amount_micro=2 * one,
        name="two requests",
        emails=["ops@example.com"],
    )
    seen = runs(alert_worker)
    wait_until(lambda: runs(alert_worker) >= seen + 2, timeout_s=20, what="two alert runs")
    assert not AlertFiring.objects.exists()  # 25% of the budget, half the amount

    ask(stack, tenant, stream=True)  # 2 requests: 50% and the amount, exactly
    firings = wait_until(
        lambda: (
            list(AlertFiring.objects.order_by("id")) if AlertFiring.objects.count() == 2 else None
        ),
        timeout_s=20,
        what="two firings",
    )
    assert [(f.rule_id, f.threshold, f.value_micro) for f in firings] == [
        (pct_rule.pk, "pct:50", 2 * one),
        (amount_rule.pk, f"amount:{2 * one}", 2 * one),
    ]
    ask(stack, tenant)  # 75%: nothing new
    wait_until(lambda: spent(tenant) == 3 * one, what="the third request's spend")
    seen = runs(alert_worker)
    wait_until(lambda: runs(alert_worker) >= seen + 2, timeout_s=20, what="two alert runs")
    assert AlertFiring.objects.count() == 2  # once per period, however often evaluated

    def delivered():
        rows = AlertDelivery.objects.filter(webhook=hook, state="delivered")
        return rows.count() == 2 and len(smtp.messages) == 1

    wait_until(delivered, timeout_s=30, what="the webhook and email deliveries")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    log = client.get(f"/api/webhooks/{hook.pk}/deliveries").json()["results"]
    # Whichever firing met the 500 was tried again a second later; both tries are logged.
    assert sorted(d["event_id"] for d in log) == sorted(f.public_id for f in firings)
    assert sorted([(t["number"], t["status_code"]) for t in d["tries"]] for d in log) == [
        [(1, 200)],
        [(1, 500), (2, 200)],
    ]
    assert sorted((d["state"], d["attempts"]) for d in log) == [("delivered", 1), ("delivered", 2)]
    assert all(r.signed for r in endpoint.received)
    assert [r.status for r in endpoint.received].count(500) == 1
    assert len(endpoint.received) == 3
    assert {orjson.loads(r.body)["id"] for r in endpoint.received} == {f.public_id for f in firings}
    [(recipients, message)] = smtp.messages
    assert recipients == ["ops@example.com"]
    assert "two requests (group): spent" in " ".join(message["Subject"].split())

    # The dead receiver: tried, failing, retried; requests never noticed.
    dead_rows = AlertDelivery.objects.filter(webhook=dead)
    assert dead_rows.count() == 2
    assert all(d.state == "pending" and d.attempts >= 1 for d in dead_rows)
    assert {d.last_error for d in dead_rows} == {"ConnectError posting to the webhook"}
    ask(stack, tenant)

    # The dashboard's "send a test" is this call: the worker sends it at once, signed.
    queued = client.post(f"/api/webhooks/{hook.pk}/test")
    assert queued.status_code == 202
    test_id = queued.json()["event_id"]
    wait_until(
        lambda: any(r.event_id == test_id for r in endpoint.received),
        timeout_s=20,
        what="the test alert",
    )
    test = next(r for r in endpoint.received if r.event_id == test_id)
    assert test.signed and orjson.loads(test.body)["type"] == "alert.test"
