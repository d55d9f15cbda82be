"""The Alerts page in a real browser, at a desktop and a phone width, against a real
gateway: a webhook to a private address refused, a public one added with its secret shown
once, a rule created and deleted, and "Send a test" landing, signed, at a real receiver and
in the webhook's delivery log. The pages keep their policy, fit and pass axe."""

from __future__ import annotations

import orjson

from accounts.models import Account, Group
from alerts import services
from alerts.delivery import deliveries_send
from alerts.evaluate import rules_evaluate
from alerts.models import AlertRule, AlertWebhook
from core.sealing import unseal
from tests.alerts.conftest import allowing_loopback
from tests.billing.test_budget_periods import spend
from tests.dashboard.test_browser import sign_in
from tests.dashboard.test_pages_layout import check
from tests.support.alert_receivers import WebhookReceiver
from tests.support.browser import DESKTOP, requires_chromium

pytestmark = requires_chromium


def add_webhook(page, url: str) -> None:
    if not page.is_visible("#add-webhook"):
        page.click("#add-webhook-box summary")
    page.fill("#add-webhook input[name=url]", url)
    page.click("#add-webhook button[type=submit]")


def test_webhooks_rules_and_a_test_send_on_the_alerts_page(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    base = f"{stack.url}/dashboard/{tenant.account_id}"
    size = "desktop" if page.viewport_size == DESKTOP else "phone"
    page.click('nav >> text="Alerts"')

    add_webhook(page, "http://10.0.0.7/hook")
    assert "is a private address, which Tollgate does not call" in page.inner_text("#add-webhook")
    add_webhook(page, "https://93.184.215.14/tollgate")  # a public literal: nothing resolved
    secret = page.inner_text("#secret")
    hook = AlertWebhook.objects.get(account_id=tenant.account_id)
    sealed = unseal(
        bytes(hook.secret_sealed), version=hook.secret_version, bound_to=hook.bound_to()
    )
    assert secret == sealed and secret.startswith("whsec_")
    page.shot("1-webhook-added")
    page.goto(f"{base}/alerts/")
    assert secret not in page.content()  # shown that once

    page.click("#create-rule-box summary")
    page.select_option("#create-rule select[name=scope]", "group")
    page.select_option("#create-rule select[name=group]", str(tenant.group_id))
    page.fill("#create-rule input[name=percents]", "50, 90")
    page.fill("#create-rule input[name=emails]", "ops@example.com")
    page.click("#create-rule button[type=submit]")
    rule = AlertRule.objects.get(account_id=tenant.account_id)
    assert (rule.scope, rule.group_id, rule.threshold_pcts, rule.emails) == (
        "group",
        tenant.group_id,
        [50, 90],
        ["ops@example.com"],
    )
    assert page.inner_text(f"tr[data-rule='{rule.pk}'] td.fires") == "50%, 90%"

    # Spend past 50% of a budget (a stored usage row, settled as a gateway's): it is listed.
    Group.objects.filter(pk=tenant.group_id).update(budget_max_micro=1_000)
    spend(tenant, 600)
    [firing] = rules_evaluate()
    page.goto(f"{base}/alerts/")
    row = page.inner_text(f"tr[data-firing='{firing.pk}']")
    assert "arule_" in row and "reached 50% of its budget, now $0.0006" in row
    assert "https://93.184.215.14/tollgate: pending" in row
    # Removing the webhook drops what was still to be sent to it.
    page.click(f"tr[data-webhook='{hook.pk}'] >> text=Remove")
    page.click("#confirm-delete button[type=submit]")
    assert not AlertWebhook.objects.filter(pk=hook.pk).exists()
    assert page.inner_text(f"tr[data-firing='{firing.pk}'] td.sent") == "email: pending"

    receiver = WebhookReceiver()
    try:
        with allowing_loopback():
            local, receiver.secret = services.alert_webhook_create(
                account=Account.objects.get(pk=tenant.account_id), url=receiver.url
            )
        page.goto(f"{base}/alerts/")
        page.click(f"tr[data-webhook='{local.pk}'] >> text=Send a test")
        page.wait_for_url(f"{base}/alerts/webhooks/{local.pk}/")
        assert "not yet" in page.inner_text("#alert-deliveries")
        with allowing_loopback():
            # What the worker does: the test, the alert's email (to the test outbox), and the
            # alert to the operator's sink (the log sink here).
            assert deliveries_send().delivered == 3
        page.reload()
        assert "#1: 200" in page.inner_text("#alert-deliveries")
        page.shot("2-test-delivered")
        [got] = receiver.received
        assert got.signed and orjson.loads(got.body)["type"] == "alert.test"
    finally:
        receiver.close()

    for path, shot in [("alerts/", "3-alerts"), (f"alerts/webhooks/{local.pk}/", "4-log")]:
        assert check(page, f"{base}/{path}", shot, size) == [], path

    page.goto(f"{base}/alerts/")
    page.click(f"tr[data-rule='{rule.pk}'] >> text=Delete")
    page.click("#confirm-delete button[type=submit]")
    assert not AlertRule.objects.filter(pk=rule.pk).exists()
    assert "No alert rules yet." in page.inner_text("#alert-rules")
