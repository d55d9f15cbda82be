"""The tenant API for guardrails: own custom and webhook guardrails (patterns compiled or
refused as LM-2001 naming the field, a webhook's URL public and its secret shown once and
sealed), the operator's listed read-only, writes for owners and admins, another account's
ids unknown, every write audited and announced to the gateways."""

from __future__ import annotations

import pytest

from accounts.models import Membership
from audit.models import AuditEntry
from core.sealing import unseal
from guardrails import services
from guardrails.custom import PatternRejected, compile_custom
from guardrails.models import Guardrail
from guardrails.selectors import guardrails_for
from tests.alerts.conftest import allowing_loopback
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db

VOLATILE = ("created_at", "updated_at")


def actions(account_id: int | None) -> list[str]:
    rows = AuditEntry.objects.filter(account_id=account_id, action__startswith="guardrail.")
    return list(rows.order_by("seq").values_list("action", flat=True))


def stable(body: dict) -> dict:
    return {name: value for name, value in body.items() if name not in VOLATILE}


def operator_guardrail(name: str = "pii", **fields) -> Guardrail:
    fields = {"kind": "detectors", "detectors": ["email", "payment_card"], **fields}
    guardrail, _ = services.guardrail_create(account=None, name=name, **fields)
    return guardrail


def test_a_custom_guardrail_is_created_read_listed_and_audited():
    tenant = make_tenant()
    client = client_for(tenant)

    created = client.post(
        "/api/guardrails",
        {
            "name": "project-names",
            "kind": "custom",
            "phase": "input",
            "action": "redact",
            "patterns": [r"\bPRJ-[0-9]{4}\b"],
            "words": ["bluebird"],
        },
        format="json",
    )

    assert created.status_code == 201, created.json()
    body = created.json()
    pk = Guardrail.objects.get().pk
    expected = {
        "id": f"grd_{pk}",
        "owner": "account",
        "account": tenant.account_id,
        "name": "project-names",
        "description": "",
        "kind": "custom",
        "phase": "input",
        "action": "redact",
        "detectors": [],
        "patterns": [r"\bPRJ-[0-9]{4}\b"],
        "words": ["bluebird"],
        "moderation_model": "",
        "moderation_threshold": None,
        "webhook_url": "",
        "secret_prefix": "",
        "deadline_ms": 2000,
        "fail_mode": "open",
        "enabled": True,
    }
    assert stable(body) == expected
    assert stable(client.get(f"/api/guardrails/grd_{pk}").json()) == expected
    assert [stable(row) for row in client.get("/api/guardrails").json()["results"]] == [expected]
    entry = AuditEntry.objects.get(account_id=tenant.account_id, action="guardrail.create")
    assert (entry.target_type, entry.target_id, entry.after["patterns"]) == (
        "guardrail",
        str(pk),
        [r"\bPRJ-[0-9]{4}\b"],
    )

    changed = client.patch(
        f"/api/guardrails/grd_{pk}", {"action": "block", "words": []}, format="json"
    )
    assert changed.status_code == 200
    assert (changed.json()["action"], changed.json()["words"]) == ("block", [])
    entry = AuditEntry.objects.filter(action="guardrail.update").get()
    assert (entry.before, entry.after) == (
        {"action": "redact", "words": ["bluebird"]},
        {"action": "block", "words": []},
    )
    assert client.delete(f"/api/guardrails/grd_{pk}").status_code == 204
    assert not Guardrail.objects.exists()
    assert actions(tenant.account_id) == [
        "guardrail.create",
        "guardrail.update",
        "guardrail.delete",
    ]


@pytest.mark.parametrize(
    ("field", "values"),
    [("patterns", ["(unclosed"]), ("patterns", ["ok", "a*"]), ("words", ["fine", "  "])],
)
def test_a_refused_pattern_or_word_is_lm_2001_with_its_message(field, values):
    tenant = make_tenant()
    with pytest.raises(PatternRejected) as rejected:
        compile_custom(**{field: values})

    answer = client_for(tenant).post(
        "/api/guardrails", {"name": "mine", "kind": "custom", field: values}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json() == {
        "error": {
            "message": f"{field}: {rejected.value}",
            "type": "invalid_request_error",
            "code": "LM-2001",
        }
    }
    assert not Guardrail.objects.exists()


def test_the_messages_name_the_pattern_and_why():
    tenant = make_tenant()
    client = client_for(tenant)
    empty = client.post(
        "/api/guardrails",
        {"name": "m", "kind": "custom", "patterns": ["ok", "a*"]},
        format="json",
    )
    assert empty.json()["error"]["message"] == (
        "patterns: pattern 2: matches the empty string, so it would match everywhere"
    )
    redacting = client.post(
        "/api/guardrails",
        {"name": "m", "kind": "webhook", "action": "redact", "webhook_url": "https://x.example"},
        format="json",
    )
    assert redacting.json()["error"]["message"] == (
        "action: Only detectors and custom guardrails can redact; block or flag."
    )
    for kind in ("detectors", "moderation"):
        answer = client.post("/api/guardrails", {"name": "m", "kind": kind}, format="json")
        assert answer.json()["error"]["message"] == f'kind: "{kind}" is not a valid choice.'
    slow = client.post(
        "/api/guardrails",
        {"name": "m", "kind": "custom", "words": ["x"], "deadline_ms": 60000},
        format="json",
    )
    assert slow.json()["error"]["message"] == "deadline_ms: Between 100 and 10000 milliseconds."
    named = client.post(
        "/api/guardrails", {"name": "Has Spaces", "kind": "custom", "words": ["x"]}, format="json"
    )
    assert named.json()["error"]["message"] == (
        "name: A name is 1-64 lower-case letters, digits, '-' or '_', starting with a letter "
        "or digit."
    )
    assert (
        client.post(
            "/api/guardrails", {"name": "m", "kind": "custom", "words": ["x"]}, format="json"
        ).status_code
        == 201
    )
    again = client.post(
        "/api/guardrails", {"name": "m", "kind": "custom", "words": ["y"]}, format="json"
    )
    assert again.json()["error"]["message"] == "name: A guardrail named 'm' exists already."


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1/check", "http://127.0.0.1:9/check", "http://169.254.169.254/"]
)
def test_a_webhook_to_a_private_address_is_refused(url):
    tenant = make_tenant()
    answer = client_for(tenant).post(
        "/api/guardrails", {"name": "hook", "kind": "webhook", "webhook_url": url}, format="json"
    )
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert message.startswith("webhook_url: The webhook's host ")
    assert message.endswith(" address, which Tollgate does not call.")
    assert not Guardrail.objects.exists()


def test_a_webhook_secret_is_shown_once_sealed_and_never_on_the_trail():
    tenant = make_tenant()
    client = client_for(tenant)
    with allowing_loopback():
        created = client.post(
            "/api/guardrails",
            {
                "name": "hook",
                "kind": "webhook",
                "phase": "output",
                "action": "flag",
                "webhook_url": "http://127.0.0.1:8999/check",
                "deadline_ms": 500,
                "fail_mode": "closed",
            },
            format="json",
        )
    assert created.status_code == 201, created.json()
    body = created.json()
    secret = body["secret"]
    assert secret.startswith("whsec_") and len(secret) == 49
    assert body["secret_prefix"] == secret[:12]
    row = Guardrail.objects.get()
    assert secret.encode() not in bytes(row.secret_sealed)
    assert unseal(
        bytes(row.secret_sealed), version=row.secret_version, bound_to=row.bound_to()
    ) == (secret)
    assert "secret" not in client.get(f"/api/guardrails/{body['id']}").json()
    assert "secret" not in client.get("/api/guardrails").json()["results"][0]
    trail = AuditEntry.objects.filter(account_id=tenant.account_id)
    assert secret not in str(list(trail.values("before", "after")))

    client.post("/api/guardrail-attachments", {"guardrail": body["id"]}, format="json")
    (spec,) = guardrails_for(tenant.account_id, tenant.group_id, tenant.api_key_id)
    assert (spec.kind, spec.webhook_url, spec.webhook_secret, spec.deadline_ms) == (
        "webhook",
        "http://127.0.0.1:8999/check",
        secret,
        500,
    )
    assert (spec.phase, spec.action, spec.fail_mode) == ("output", "flag", "closed")


def test_the_operators_guardrails_are_listed_read_only():
    tenant = make_tenant()
    client = client_for(tenant)
    pii = operator_guardrail()
    with allowing_loopback():
        hook, _ = services.guardrail_create(
            account=None, name="ops-hook", kind="webhook", webhook_url="http://127.0.0.1:9/x"
        )

    listed = client.get("/api/guardrails").json()["results"]
    assert [(row["id"], row["owner"], row["account"]) for row in listed] == [
        (f"grd_{pii.pk}", "operator", None),
        (f"grd_{hook.pk}", "operator", None),
    ]
    assert listed[0]["detectors"] == ["email", "payment_card"]
    # The operator's endpoint is the operator's business.
    assert (listed[1]["webhook_url"], listed[1]["secret_prefix"]) == ("", "")
    patched = client.patch(f"/api/guardrails/grd_{pii.pk}", {"enabled": False}, format="json")
    assert patched.status_code == 403
    assert patched.json()["error"]["message"] == (
        "The operator's guardrails are changed by the operator only."
    )
    assert client.delete(f"/api/guardrails/grd_{pii.pk}").status_code == 403
    pii.refresh_from_db()
    assert pii.enabled is True


def test_viewers_read_and_only_owners_and_admins_write():
    tenant = make_tenant()
    client = client_for(tenant)
    guardrail_id = client.post(
        "/api/guardrails", {"name": "m", "kind": "custom", "words": ["x"]}, format="json"
    ).json()["id"]
    attachment_id = client.post(
        "/api/guardrail-attachments", {"guardrail": guardrail_id}, format="json"
    ).json()["id"]
    Membership.objects.filter(account_id=tenant.account_id).update(role=Membership.Role.VIEWER)

    assert client.get(f"/api/guardrails/{guardrail_id}").status_code == 200
    assert len(client.get("/api/guardrail-attachments").json()["results"]) == 1
    refused = [
        client.post("/api/guardrails", {"name": "n", "kind": "custom", "words": ["y"]}),
        client.patch(f"/api/guardrails/{guardrail_id}", {"enabled": False}, format="json"),
        client.delete(f"/api/guardrails/{guardrail_id}"),
        client.post("/api/guardrail-attachments", {"guardrail": guardrail_id}, format="json"),
        client.delete(f"/api/guardrail-attachments/{attachment_id}"),
    ]
    assert [answer.status_code for answer in refused] == [403] * 5
    assert refused[0].json()["error"] == {
        "message": "Only the account's owners and admins may do this.",
        "type": "permission_error",
        "code": "LM-1003",
    }


def test_another_accounts_ids_are_unknown():
    mine, theirs = make_tenant(), make_tenant()
    theirs_client = client_for(theirs)
    guardrail_id = theirs_client.post(
        "/api/guardrails", {"name": "m", "kind": "custom", "words": ["x"]}, format="json"
    ).json()["id"]
    attachment_id = theirs_client.post(
        "/api/guardrail-attachments", {"guardrail": guardrail_id}, format="json"
    ).json()["id"]
    client = client_for(mine)

    answers = [
        client.get(f"/api/guardrails/{guardrail_id}"),
        client.patch(f"/api/guardrails/{guardrail_id}", {"enabled": False}, format="json"),
        client.delete(f"/api/guardrails/{guardrail_id}"),
        client.delete(f"/api/guardrail-attachments/{attachment_id}"),
        client.get("/api/guardrails/grd_0"),
        client.get("/api/guardrails/12"),
        client.delete("/api/guardrail-attachments/gatt_99999999999999999999"),
    ]
    assert [answer.status_code for answer in answers] == [404] * 7
    assert client.get("/api/guardrails").json() == {"results": []}
    assert client.get("/api/guardrail-attachments").json() == {"results": []}
    borrowed = client.post("/api/guardrail-attachments", {"guardrail": guardrail_id}, format="json")
    assert borrowed.json()["error"]["message"] == "guardrail: A guardrail id (grd_<n>)."
    own_id = client.post(
        "/api/guardrails", {"name": "m", "kind": "custom", "words": ["x"]}, format="json"
    ).json()["id"]
    for field, value, message in (
        ("group", theirs.group_id, "group: A group of this account."),
        ("api_key", theirs.api_key_id, "api_key: A key of this account."),
    ):
        answer = client.post(
            "/api/guardrail-attachments", {"guardrail": own_id, field: value}, format="json"
        )
        assert (answer.status_code, answer.json()["error"]["message"]) == (400, message)


def test_a_webhook_url_changed_to_a_private_address_is_refused():
    tenant = make_tenant()
    client = client_for(tenant)
    with allowing_loopback():
        created = client.post(
            "/api/guardrails",
            {"name": "hook", "kind": "webhook", "webhook_url": "http://127.0.0.1:9/x"},
            format="json",
        ).json()
    answer = client.patch(
        f"/api/guardrails/{created['id']}", {"webhook_url": "http://10.1.2.3/x"}, format="json"
    )
    assert answer.json()["error"]["message"] == (
        "webhook_url: The webhook's host 10.1.2.3 is a private address, which Tollgate does "
        "not call."
    )
    assert Guardrail.objects.get().webhook_url == "http://127.0.0.1:9/x"


def test_rotating_a_webhook_secret_shows_the_new_one_once_audits_and_announces_it(
    announced, django_capture_on_commit_callbacks
):
    tenant = make_tenant()
    client = client_for(tenant)
    with allowing_loopback():
        created = client.post(
            "/api/guardrails",
            {"name": "hook", "kind": "webhook", "webhook_url": "http://127.0.0.1:9/x"},
            format="json",
        ).json()
    announced.clear()

    with django_capture_on_commit_callbacks(execute=True):
        rotated = client.post(f"/api/guardrails/{created['id']}/rotate-secret")

    assert rotated.status_code == 200, rotated.json()
    body = rotated.json()
    secret = body.pop("secret")
    assert secret.startswith("whsec_") and len(secret) == 49 and secret != created["secret"]
    assert created["secret_prefix"] != secret[:12]
    del created["secret"]
    assert stable(body) == {**stable(created), "secret_prefix": secret[:12]}
    row = Guardrail.objects.get()
    assert unseal(
        bytes(row.secret_sealed), version=row.secret_version, bound_to=row.bound_to()
    ) == (secret)
    assert "secret" not in client.get(f"/api/guardrails/{created['id']}").json()
    assert actions(tenant.account_id) == ["guardrail.create", "guardrail.rotate"]
    entry = AuditEntry.objects.get(action="guardrail.rotate")
    assert (entry.before, entry.after) == (
        {"secret_prefix": created["secret_prefix"]},
        {"secret_prefix": secret[:12]},
    )
    assert announced == [("group", {"account_id": tenant.account_id})]


def test_only_a_webhook_guardrail_of_ones_own_account_has_a_secret_to_rotate():
    tenant = make_tenant()
    client = client_for(tenant)
    custom_id = client.post(
        "/api/guardrails", {"name": "m", "kind": "custom", "words": ["x"]}, format="json"
    ).json()["id"]
    pii = operator_guardrail()

    custom = client.post(f"/api/guardrails/{custom_id}/rotate-secret")
    operators = client.post(f"/api/guardrails/grd_{pii.pk}/rotate-secret")
    Membership.objects.filter(account_id=tenant.account_id).update(role=Membership.Role.VIEWER)
    viewer = client.post(f"/api/guardrails/{custom_id}/rotate-secret")

    assert (custom.status_code, custom.json()["error"]) == (
        400,
        {
            "message": "kind: Only a webhook guardrail has a secret.",
            "type": "invalid_request_error",
            "code": "LM-2001",
        },
    )
    assert operators.status_code == 403
    assert viewer.status_code == 403
    assert client.get(f"/api/guardrails/{custom_id}/rotate-secret").status_code == 405
    assert actions(tenant.account_id) == ["guardrail.create"]
