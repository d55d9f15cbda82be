"""The Guardrails page in a real browser, at a desktop and a phone width, against a real
gateway: a pattern RE2 refuses is shown on its field; a custom guardrail made and attached
to the account on the page blocks the official SDK's request carrying its word (LM-2030),
and the usage list, the request's page and the Guardrails page then show that verdict; a
webhook guardrail's secret is shown once; the operator's guardrail is listed read-only with
no Detach on what the operator attached; the tenant's attachment is detached after a
confirmation, and the next request is served. Every change is on the audit trail; the pages
fit and pass axe."""

from __future__ import annotations

import openai
import pytest

from accounts.models import Account
from audit.models import AuditEntry
from guardrails import services
from guardrails.models import Guardrail, GuardrailAttachment
from tests.dashboard.test_browser import sign_in
from tests.dashboard.test_pages_layout import check
from tests.support.browser import DESKTOP, requires_chromium
from tests.support.usage import usage_rows

pytestmark = requires_chromium
FALCON = [{"role": "user", "content": "What is the status of project falcon?"}]


def open_box(page, box: str) -> None:
    if not page.is_visible(f"#{box}"):
        page.click(f"#{box}-box summary")


def create(page, **fields: str) -> None:
    open_box(page, "create-guardrail")
    form = "#create-guardrail"
    page.fill(f"{form} input[name=name]", fields["name"])
    page.select_option(f"{form} select[name=kind]", fields["kind"])
    page.select_option(f"{form} select[name=phase]", fields.get("phase", "input"))
    page.select_option(f"{form} select[name=action]", fields.get("action", "block"))
    page.fill(f"{form} textarea[name=patterns]", fields.get("patterns", ""))
    page.fill(f"{form} textarea[name=words]", fields.get("words", ""))
    page.fill(f"{form} input[name=webhook_url]", fields.get("webhook_url", ""))
    page.click(f"{form} button[type=submit]")


def test_make_attach_see_a_block_and_its_verdict_then_detach(stack, page):
    tenant = stack.tenant()
    account = Account.objects.get(pk=tenant.account_id)
    ops, _ = services.guardrail_create(
        account=None, name="no-cards", kind="detectors", detectors=["payment_card"]
    )
    services.attachment_create(guardrail=ops, account=account, by="operator")
    sign_in(page, stack, tenant)
    base = f"{stack.url}/dashboard/{tenant.account_id}"
    size = "desktop" if page.viewport_size == DESKTOP else "phone"
    page.click('nav >> text="Guardrails"')

    create(page, name="falcon", kind="custom", patterns="ok\n(unclosed", words="falcon")
    assert "pattern 2: RE2 cannot compile it: missing ): (unclosed" in page.inner_text(
        "#create-guardrail .field.invalid"
    )
    page.shot("3-pattern-refused")
    create(page, name="falcon", kind="custom", words="Falcon\nbluebird")
    own = Guardrail.objects.get(account_id=tenant.account_id)
    assert (own.kind, own.words, own.patterns, own.action) == (
        "custom",
        ["Falcon", "bluebird"],
        [],
        "block",
    )
    open_box(page, "attach-guardrail")
    page.select_option("#attach-guardrail select[name=guardrail]", str(own.pk))
    page.select_option("#attach-guardrail select[name=level]", "account")
    page.click("#attach-guardrail button[type=submit]")
    attached = GuardrailAttachment.objects.get(guardrail=own)
    assert "Guardrail falcon attached" in page.inner_text(".messages")
    page.shot("4-attached")

    client = stack.openai(tenant)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-4o-mini", messages=FALCON)
    assert refused.value.body["code"] == "LM-2030"
    assert "falcon" in refused.value.body["message"]
    request_id = refused.value.response.headers["x-request-id"]
    [row] = usage_rows([request_id], expect=1)
    assert row.guardrails == [
        {"guardrail": "no-cards", "phase": "input", "action": "block", "matches": 0},
        {"guardrail": "falcon", "phase": "input", "action": "block", "matches": 1},
    ]

    page.goto(f"{base}/usage/")
    badge = page.locator(f"tr[data-request='{request_id}'] .badge.guardrail")
    assert badge.inner_text() == "blocked"
    assert badge.get_attribute("title") == "Blocked by guardrail falcon"
    assert check(page, f"{base}/usage/", "5-usage", size) == []
    assert check(page, f"{base}/usage/{request_id}/", "6-request", size) == []
    assert page.locator("#verdicts tbody tr").all_inner_texts() == [
        "no-cards\tinput\tblock\t0\t–",
        "falcon\tinput\tblock: blocked\t1\t–",
    ]

    assert check(page, f"{base}/guardrails/", "7-guardrails", size) == []
    mine = page.locator(f"tr[data-guardrail='{own.pk}']")
    assert mine.locator("td.recent").inner_text() == "1 found in 1 check"
    theirs = page.locator(f"tr[data-guardrail='{ops.pk}']")
    assert theirs.locator("td.recent").inner_text() == "0 found in 1 check"
    assert "operator's" in theirs.locator("td.name").inner_text()
    assert "the account, by the operator" in theirs.locator("td.attached").inner_text()
    assert theirs.locator("text=Detach").count() == 0
    assert theirs.locator("td.actions").inner_text() == "read-only"

    create(
        page, name="my-hook", kind="webhook", action="flag", webhook_url="https://93.184.215.14/g"
    )
    hook = Guardrail.objects.get(account_id=tenant.account_id, kind="webhook")
    assert hook.webhook_url == "https://93.184.215.14/g"
    secret = page.inner_text("#secret")
    assert secret.startswith("whsec_") and secret[:12] == hook.secret_prefix
    # The Copy button goes under the card's one <code>: the secret.
    assert page.locator("#new-guardrail code").all_inner_texts() == [secret]
    assert page.locator("#new-guardrail button.copy").count() == 1
    page.shot("8-webhook-secret")
    assert check(page, f"{base}/guardrails/", "9-guardrails-two", size) == []
    assert secret not in page.content()
    assert check(page, f"{base}/guardrails/{own.pk}/", "10-edit", size) == []

    page.goto(f"{base}/guardrails/")
    mine.locator("text=Detach").click()
    assert check(page, page.url, "11-detach", size) == []
    assert "It stops checking the requests of the whole account" in page.inner_text(
        "#delete-warning"
    )
    page.click("#confirm-delete button[type=submit]")
    page.shot("12-detached")
    assert not GuardrailAttachment.objects.filter(pk=attached.pk).exists()
    assert "not attached" in mine.locator("td.attached").inner_text()
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=FALCON)
    assert answer.choices[0].message.content

    assert list(
        AuditEntry.objects.filter(account_id=tenant.account_id, action__startswith="guardrail.")
        .order_by("seq")
        .values_list("action", "target_label")
    ) == [
        ("guardrail.attach", f"no-cards on account {tenant.account_id}"),
        ("guardrail.create", "falcon"),
        ("guardrail.attach", f"falcon on account {tenant.account_id}"),
        ("guardrail.create", "my-hook"),
        ("guardrail.detach", f"falcon on account {tenant.account_id}"),
    ]
