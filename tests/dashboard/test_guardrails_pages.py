"""The Guardrails page through Django's test client: the account's own custom and webhook
guardrails made (a webhook's secret shown once), changed and deleted, a pattern RE2 refuses
shown on its field, guardrails attached and detached at the account, a group or a key; the
operator's listed read-only, and neither detached nor changed by the tenant; a viewer reads
only; every write on the audit trail. The usage pages show each row's verdicts, and the
Guardrails page counts them over the last 24 hours."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import Account, ApiKey, Group, Membership
from audit.models import AuditEntry
from core.sealing import unseal
from dashboard import guardrail_selectors
from guardrails import services
from guardrails.models import Guardrail, GuardrailAttachment
from tests.alerts.conftest import allowing_loopback
from tests.dashboard.test_manage import text
from tests.dashboard.test_pages import member, page, signed_in
from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store

pytestmark = pytest.mark.django_db

CUSTOM = {
    "form": "create",
    "name": "order-ids",
    "description": "Our order numbers",
    "kind": "custom",
    "phase": "input",
    "action": "redact",
    "patterns": "ORD-[0-9]{6}\r\nINV-[0-9]+\r\n",
    "words": "Project Falcon\r\n\r\n  bluebird \r\n",
    "webhook_url": "",
    "deadline_ms": "2000",
    "fail_mode": "open",
    "enabled": "on",
}
WEBHOOK = {
    **CUSTOM,
    "name": "my-hook",
    "kind": "webhook",
    "phase": "output",
    "action": "flag",
    "patterns": "",
    "words": "",
    "webhook_url": "http://127.0.0.1:8999/check",
    "deadline_ms": "500",
    "fail_mode": "closed",
}


def words(response) -> str:
    return html.unescape(text(response))


def text_of(markup: str) -> str:
    """A piece of a page as its words."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", markup))).strip()


def trail(account_id: int) -> list[tuple[str, str]]:
    rows = AuditEntry.objects.filter(account_id=account_id, action__startswith="guardrail.")
    return list(rows.order_by("seq").values_list("action", "target_label"))


def operator_guardrail(name: str = "pii") -> Guardrail:
    made, _ = services.guardrail_create(
        account=None, name=name, kind="detectors", detectors=["email", "payment_card"]
    )
    return made


def test_a_custom_guardrail_is_created_with_one_value_a_line_and_audited():
    tenant = make_tenant()
    client = signed_in(tenant)

    response = client.post(page(tenant, "guardrails/"), CUSTOM, follow=True)

    assert response.redirect_chain == [(page(tenant, "guardrails/"), 302)]
    assert "Guardrail order-ids created. Attach it to apply it." in words(response)
    row = Guardrail.objects.get(account_id=tenant.account_id)
    assert (row.kind, row.phase, row.action, row.description, row.enabled) == (
        "custom",
        "input",
        "redact",
        "Our order numbers",
        True,
    )
    assert row.patterns == ["ORD-[0-9]{6}", "INV-[0-9]+"]
    assert row.words == ["Project Falcon", "bluebird"]
    assert (row.webhook_url, row.secret_prefix, row.deadline_ms) == ("", "", 2000)
    listed = words(response)
    assert "order-ids Our order numbers Own patterns and words (RE2): 2 patterns, 2 words" in (
        listed
    )
    assert "not attached" in listed
    assert trail(tenant.account_id) == [("guardrail.create", "order-ids")]


def test_a_webhook_guardrail_shows_its_secret_once():
    tenant = make_tenant()
    client = signed_in(tenant)

    with allowing_loopback():
        response = client.post(page(tenant, "guardrails/"), WEBHOOK)

    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")
    row = Guardrail.objects.get(account_id=tenant.account_id)
    body = response.content.decode()
    secret = body.split('<code id="secret">')[1].split("</code>")[0]
    sealed = unseal(bytes(row.secret_sealed), version=row.secret_version, bound_to=row.bound_to())
    assert secret == sealed and secret.startswith("whsec_") and len(secret) == 49
    assert (row.kind, row.phase, row.action, row.webhook_url, row.deadline_ms, row.fail_mode) == (
        "webhook",
        "output",
        "flag",
        "http://127.0.0.1:8999/check",
        500,
        "closed",
    )
    assert (row.patterns, row.words) == ([], [])
    listing = client.get(page(tenant, "guardrails/")).content.decode()
    assert secret not in listing and f"{secret[:12]}…" in listing
    assert "within 500 ms, else blocked" in words(client.get(page(tenant, "guardrails/")))
    assert trail(tenant.account_id) == [("guardrail.create", "my-hook")]
    assert secret not in str(list(AuditEntry.objects.values()))


def test_a_new_webhook_secret_is_shown_once_and_audited():
    tenant = make_tenant()
    client = signed_in(tenant)
    with allowing_loopback():
        client.post(page(tenant, "guardrails/"), WEBHOOK)
    row = Guardrail.objects.get(account_id=tenant.account_id)
    old = row.secret_prefix

    response = client.post(page(tenant, f"guardrails/{row.pk}/rotate/"))

    secret = response.content.decode().split('<code id="secret">')[1].split("</code>")[0]
    row.refresh_from_db()
    assert secret[:12] == row.secret_prefix != old
    assert trail(tenant.account_id)[-1] == ("guardrail.rotate", "my-hook")


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        ("ok\r\n(unclosed", "pattern 2: RE2 cannot compile it: missing ): (unclosed"),
        ("a(?=b)", "pattern 1: RE2 cannot compile it: invalid perl operator: (?="),
        ("x\r\na*", "pattern 2: matches the empty string, so it would match everywhere"),
    ],
)
def test_a_pattern_re2_refuses_is_shown_on_its_field_and_nothing_is_saved(patterns, message):
    tenant = make_tenant()
    response = signed_in(tenant).post(page(tenant, "guardrails/"), {**CUSTOM, "patterns": patterns})

    assert response.status_code == 200
    body = response.content.decode()
    field = body.split('<label for="id_patterns">')[1].split("</div>")[0]
    assert f'<p class="error" role="alert">{html.escape(message)}</p>' in field
    assert '<details class="card" id="create-guardrail-box" open>' in body
    assert not Guardrail.objects.exists()
    assert trail(tenant.account_id) == []


def test_the_rules_refusals_are_shown_on_their_fields():
    tenant = make_tenant()
    client = signed_in(tenant)
    cases = [
        ({**CUSTOM, "name": "Bad Name"}, "name", "A name is 1-64 lower-case letters"),
        ({**WEBHOOK, "action": "redact"}, "action", "Only detectors and custom guardrails can"),
        ({**CUSTOM, "patterns": "", "words": ""}, "patterns", "needs patterns or words"),
        ({**WEBHOOK, "webhook_url": "http://10.1.2.3/x"}, "webhook_url", "is a private address"),
        ({**CUSTOM, "kind": "detectors"}, "kind", "Select a valid choice. detectors is not"),
    ]
    for data, field, message in cases:
        body = client.post(page(tenant, "guardrails/"), data).content.decode()
        shown = html.unescape(body.split(f'<label for="id_{field}">')[1].split("</div>")[0])
        assert message in shown, (field, shown)
    assert not Guardrail.objects.exists()


def test_an_own_guardrail_is_edited_but_keeps_its_kind_and_a_refusal_changes_nothing():
    tenant = make_tenant()
    client = signed_in(tenant)
    client.post(page(tenant, "guardrails/"), CUSTOM)
    row = Guardrail.objects.get()
    edit = client.get(page(tenant, f"guardrails/{row.pk}/")).content.decode()
    assert 'name="kind"' not in edit and 'name="webhook_url"' not in edit
    assert "\nORD-[0-9]{6}\nINV-[0-9]+</textarea>" in edit

    refused = client.post(page(tenant, f"guardrails/{row.pk}/"), {**CUSTOM, "patterns": "(open"})
    assert "pattern 1: RE2 cannot compile it: missing ): (open" in words(refused)
    saved = client.post(
        page(tenant, f"guardrails/{row.pk}/"),
        {**CUSTOM, "action": "block", "patterns": "ORD-[0-9]{7}", "words": ""},
    )

    assert saved.status_code == 302
    row.refresh_from_db()
    assert (row.kind, row.action, row.patterns, row.words) == (
        "custom",
        "block",
        ["ORD-[0-9]{7}"],
        [],
    )
    [update] = AuditEntry.objects.filter(action="guardrail.update")
    assert (update.before["patterns"], update.after["patterns"]) == (
        ["ORD-[0-9]{6}", "INV-[0-9]+"],
        ["ORD-[0-9]{7}"],
    )
    assert (update.before["action"], update.after["action"]) == ("redact", "block")


def test_guardrails_are_attached_at_each_level_and_detached_after_a_confirmation():
    tenant = make_tenant()
    client = signed_in(tenant)
    client.post(page(tenant, "guardrails/"), CUSTOM)
    own = Guardrail.objects.get(account_id=tenant.account_id)
    ops = operator_guardrail()
    group = Group.objects.get(pk=tenant.group_id)
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    url = page(tenant, "guardrails/")

    for data in (
        {"guardrail": own.pk, "level": "account"},
        {"guardrail": own.pk, "level": "group", "group": group.pk},
        {"guardrail": ops.pk, "level": "key", "api_key": key.pk},
    ):
        response = client.post(url, {"form": "attach", **data}, follow=True)
        assert response.redirect_chain == [(url, 302)], words(response)
    again = client.post(url, {"form": "attach", "guardrail": own.pk, "level": "account"})
    assert "This guardrail is attached there already." in words(again)
    no_group = client.post(url, {"form": "attach", "guardrail": own.pk, "level": "group"})
    assert "Choose the group." in words(no_group)

    places = {
        (a.guardrail.name, a.group_id, a.api_key_id, a.attached_by)
        for a in GuardrailAttachment.objects.filter(account_id=tenant.account_id)
    }
    assert places == {
        ("order-ids", None, None, "tenant"),
        ("order-ids", group.pk, None, "tenant"),
        ("pii", None, key.pk, "tenant"),
    }
    listing = words(client.get(url))
    assert "the account, by the account Detach" in listing
    assert f"group {group.name}, by the account Detach" in listing
    assert f"key {key.prefix}… {key.name}, by the account Detach" in listing

    on_group = GuardrailAttachment.objects.get(group=group)
    asked = client.get(page(tenant, f"guardrails/attachments/{on_group.pk}/detach/"))
    assert f"It stops checking the requests of group {group.name}" in words(asked)
    assert GuardrailAttachment.objects.filter(pk=on_group.pk).exists()
    client.post(page(tenant, f"guardrails/attachments/{on_group.pk}/detach/"))
    assert not GuardrailAttachment.objects.filter(pk=on_group.pk).exists()

    assert trail(tenant.account_id) == [
        ("guardrail.create", "order-ids"),
        ("guardrail.attach", f"order-ids on account {tenant.account_id}"),
        ("guardrail.attach", f"order-ids on group {group.pk}"),
        ("guardrail.attach", f"pii on key {key.pk}"),
        ("guardrail.detach", f"order-ids on group {group.pk}"),
    ]


def test_the_operators_guardrail_is_read_only_and_what_it_attached_stays():
    tenant = make_tenant()
    account = Account.objects.get(pk=tenant.account_id)
    ops = operator_guardrail()
    forced = services.attachment_create(guardrail=ops, account=account, by="operator")
    client = signed_in(tenant)
    client.post(page(tenant, "guardrails/"), CUSTOM)
    own = Guardrail.objects.get(account_id=tenant.account_id)
    own_forced = services.attachment_create(guardrail=own, account=account, by="operator")

    body = client.get(page(tenant, "guardrails/")).content.decode()
    row = body.split(f'<tr data-guardrail="{ops.pk}">')[1].split("</tr>")[0]
    shown = text_of(row)
    assert "pii operator's" in shown
    assert "Built-in detectors: email, payment_card" in shown
    assert "the account, by the operator" in shown and "Detach" not in shown
    assert "read-only" in shown and "Edit" not in shown and "Delete" not in shown
    own_row = body.split(f'<tr data-guardrail="{own.pk}">')[1].split("</tr>")[0]
    assert "Detach" not in own_row and "Delete" not in own_row
    assert "attached by the operator" in (text_of(own_row))

    before = trail(tenant.account_id)
    for attachment in (forced, own_forced):
        path = page(tenant, f"guardrails/attachments/{attachment.pk}/detach/")
        assert client.get(path).status_code == 403
        assert client.post(path).status_code == 403
    assert client.get(page(tenant, f"guardrails/{ops.pk}/")).status_code == 404
    assert client.post(page(tenant, f"guardrails/{ops.pk}/delete/")).status_code == 404
    assert client.post(page(tenant, f"guardrails/{own.pk}/delete/")).status_code == 403
    edit = client.get(page(tenant, f"guardrails/{own.pk}/"))
    assert "only the operator can change or delete it" in words(edit)
    assert 'id="edit-guardrail"' not in edit.content.decode()
    changed = client.post(page(tenant, f"guardrails/{own.pk}/"), {**CUSTOM, "action": "flag"})
    assert changed.status_code == 403
    assert GuardrailAttachment.objects.filter(pk__in=[forced.pk, own_forced.pk]).count() == 2
    own.refresh_from_db()
    assert own.action == "redact"
    assert trail(tenant.account_id) == before


def test_an_own_guardrail_is_deleted_after_a_confirmation_with_its_attachments():
    tenant = make_tenant()
    client = signed_in(tenant)
    client.post(page(tenant, "guardrails/"), CUSTOM)
    own = Guardrail.objects.get()
    client.post(
        page(tenant, "guardrails/"), {"form": "attach", "guardrail": own.pk, "level": "account"}
    )

    asked = client.get(page(tenant, f"guardrails/{own.pk}/delete/"))
    assert "its attachments go with it" in words(asked)
    response = client.post(page(tenant, f"guardrails/{own.pk}/delete/"), follow=True)

    assert "Guardrail order-ids deleted" in words(response)
    assert not Guardrail.objects.exists() and not GuardrailAttachment.objects.exists()
    assert trail(tenant.account_id)[-1] == ("guardrail.delete", "order-ids")


def test_a_viewer_sees_the_guardrails_but_cannot_change_them():
    tenant = make_tenant()
    owner = signed_in(tenant)
    owner.post(page(tenant, "guardrails/"), CUSTOM)
    own = Guardrail.objects.get()
    owner.post(
        page(tenant, "guardrails/"), {"form": "attach", "guardrail": own.pk, "level": "account"}
    )
    attachment = GuardrailAttachment.objects.get()
    viewer = member(tenant, Membership.Role.VIEWER)
    before = trail(tenant.account_id)

    listing = viewer.get(page(tenant, "guardrails/")).content.decode()
    assert "order-ids" in listing
    for form in ('id="create-guardrail"', 'id="attach-guardrail"', "Detach", "Edit", "Delete"):
        assert form not in listing, form
    assert viewer.post(page(tenant, "guardrails/"), {**CUSTOM, "name": "v"}).status_code == 403
    attach = {"form": "attach", "guardrail": own.pk, "level": "group", "group": tenant.group_id}
    assert viewer.post(page(tenant, "guardrails/"), attach).status_code == 403
    for path in (
        f"guardrails/{own.pk}/",
        f"guardrails/{own.pk}/delete/",
        f"guardrails/{own.pk}/rotate/",
        f"guardrails/attachments/{attachment.pk}/detach/",
    ):
        assert viewer.post(page(tenant, path), CUSTOM).status_code in (403, 404), path
    assert (
        'id="edit-guardrail"'
        not in viewer.get(page(tenant, f"guardrails/{own.pk}/")).content.decode()
    )
    assert (Guardrail.objects.count(), GuardrailAttachment.objects.count()) == (1, 1)
    assert trail(tenant.account_id) == before


def test_another_accounts_guardrails_and_attachments_are_404():
    mine, theirs = make_tenant(), make_tenant()
    signed_in(theirs).post(page(theirs, "guardrails/"), CUSTOM)
    their = Guardrail.objects.get()
    signed_in(theirs).post(
        page(theirs, "guardrails/"), {"form": "attach", "guardrail": their.pk, "level": "account"}
    )
    attachment = GuardrailAttachment.objects.get()
    client = signed_in(mine)

    assert "order-ids" not in client.get(page(mine, "guardrails/")).content.decode()
    for path in (
        f"guardrails/{their.pk}/",
        f"guardrails/{their.pk}/delete/",
        f"guardrails/attachments/{attachment.pk}/detach/",
    ):
        assert client.post(page(mine, path)).status_code == 404, path
    refused = client.post(
        page(mine, "guardrails/"), {"form": "attach", "guardrail": their.pk, "level": "account"}
    )
    assert "Select a valid choice." in words(refused)
    assert GuardrailAttachment.objects.count() == 1
    assert client.get(page(theirs, "guardrails/")).status_code == 404


def verdict(name: str, action: str, matches: int, phase: str = "input", **more) -> dict:
    return {"guardrail": name, "phase": phase, "action": action, "matches": matches, **more}


def test_usage_rows_show_their_verdicts_and_the_page_counts_the_last_24_hours():
    tenant = make_tenant()
    now = datetime.now(UTC)
    row = {"group_id": tenant.group_id, "account_id": tenant.account_id}
    store(
        journal_row(
            **row,
            request_id="req-blocked",
            status=400,
            error_code="LM-2030",
            guardrails=[verdict("pii", "block", 2)],
        ),
        journal_row(
            **row,
            request_id="req-redacted",
            guardrails=[
                verdict("order-ids", "redact", 1),
                verdict("my-hook", "flag", 0, phase="output", failed=True),
            ],
        ),
        journal_row(**row, request_id="req-clean", guardrails=[verdict("pii", "block", 0)]),
        journal_row(**row, request_id="req-none"),
        # Older than a day: not counted.
        journal_row(
            **row,
            request_id="req-old",
            created_at=now - timedelta(hours=25),
            guardrails=[verdict("pii", "block", 3)],
        ),
    )
    client = signed_in(tenant)

    listing = client.get(page(tenant, "usage/")).content.decode()

    def status_of(request_id: str) -> str:
        cells = listing.split(f'<tr data-request="{request_id}"')[1].split("</tr>")[0]
        return cells.split('<td class="status">')[1].split("</td>")[0]

    assert '<span class="badge guardrail" title="Blocked by guardrail pii">blocked</span>' in (
        status_of("req-blocked")
    )
    assert (
        '<span class="badge guardrail" title="Redacted by guardrail order-ids">redacted</span>'
    ) in status_of("req-redacted")
    for quiet in ("req-clean", "req-none"):
        assert "badge guardrail" not in status_of(quiet)

    detail = client.get(page(tenant, "usage/req-redacted/")).content.decode()
    table = detail.split('<table id="verdicts">')[1].split("</table>")[0]
    assert [text_of(r) for r in re.findall(r"<tr data-guardrail=[^>]+>(.*?)</tr>", table)] == [
        "order-ids input redact: redacted 1 –",
        "my-hook output flag 0 failed: yes",
    ]
    none = client.get(page(tenant, "usage/req-none/")).content.decode()
    assert 'id="verdicts"' not in none

    client.post(page(tenant, "guardrails/"), CUSTOM)
    operator_guardrail()
    guardrails = client.get(page(tenant, "guardrails/")).content.decode()
    counts = {
        name: (text_of(guardrails.split(f"<code>{name}</code>")[1].split("</tr>")[0]))
        for name in ("pii", "order-ids")
    }
    assert "1 found in 2 checks" in counts["pii"]
    assert "1 found in 1 check " in counts["order-ids"]
    assert "from its 4 requests since" in words(client.get(page(tenant, "guardrails/")))


def test_the_verdict_counts_read_at_most_their_cap_of_rows():
    tenant = make_tenant()
    now = datetime.now(UTC)
    store(
        *(
            journal_row(
                group_id=tenant.group_id,
                account_id=tenant.account_id,
                created_at=now - timedelta(minutes=n),
                guardrails=[verdict("pii", "block", n % 2)],
            )
            for n in range(5)
        )
    )
    account = Account.objects.get(pk=tenant.account_id)

    recent = guardrail_selectors.recent_verdicts(account=account, rows_max=3)

    assert (recent.requests_read, recent.capped) == (3, True)
    assert recent.since == now - timedelta(minutes=2)  # the oldest of the three
    # The newest three: n = 0, 1, 2 (one found something).
    assert recent.by_name["pii"] == guardrail_selectors.VerdictCount(checked=3, found=1)
