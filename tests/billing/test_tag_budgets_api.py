"""The tenant API's tag budgets: CRUD scoped to the caller's accounts, the tag checked by the
tag rules, each budget shown with its tag's spend in the current period, managers only for
writes, every write on the audit trail."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import Account, Membership
from accounts.periods import period_key
from audit.models import AuditEntry
from billing.models import TagBudget, TagSpend
from tests.support.tenants import client_for, make_tenant

pytestmark = pytest.mark.django_db


def create(client: APIClient, **body):
    return client.post("/api/tag-budgets", body, format="json")


def test_a_tag_budget_is_created_listed_changed_and_deleted_with_its_current_spend():
    tenant = make_tenant()
    Account.objects.filter(pk=tenant.account_id).update(time_zone="Pacific/Auckland")
    client = client_for(tenant)
    today = period_key("daily", "Pacific/Auckland", timezone.now())
    TagSpend.objects.create(
        account_id=tenant.account_id, tag="customer-42", period=today, spent_micro=700,
        reserved_micro=50,
    )  # fmt: skip

    created = create(client, tag="Customer-42", budget_max_micro=5_000_000, budget_period="daily")

    assert created.status_code == 201
    body = created.json()
    row_id = body.pop("id")
    body.pop("created_at")
    assert body == {
        "account": tenant.account_id,
        "tag": "customer-42",
        "budget_max_micro": 5_000_000,
        "budget_period": "daily",
        "period": today,
        "spent_micro": 700,
        "reserved_micro": 50,
    }
    listed = client.get("/api/tag-budgets").json()["results"]
    assert [(r["id"], r["spent_micro"]) for r in listed] == [(row_id, 700)]

    changed = client.patch(
        f"/api/tag-budgets/{row_id}", {"budget_period": "monthly"}, format="json"
    ).json()
    month = period_key("monthly", "Pacific/Auckland", timezone.now())
    assert (changed["budget_period"], changed["period"], changed["spent_micro"]) == (
        "monthly",
        month,
        0,  # a new period's row: nothing spent in it yet
    )
    assert client.get(f"/api/tag-budgets/{row_id}").json()["budget_max_micro"] == 5_000_000

    assert client.delete(f"/api/tag-budgets/{row_id}").status_code == 204
    assert not TagBudget.objects.filter(pk=row_id).exists()
    assert TagSpend.objects.filter(account_id=tenant.account_id).count() == 1  # kept
    entries = AuditEntry.objects.filter(account_id=tenant.account_id, target_type="tag_budget")
    assert list(entries.order_by("seq").values_list("action", "target_label")) == [
        ("tag_budget.create", "customer-42"),
        ("tag_budget.update", "customer-42"),
        ("tag_budget.delete", "customer-42"),
    ]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"tag": "no spaces", "budget_max_micro": 1}, "tag", "Tag 'no spaces' is not valid"),
        ({"tag": "-lead", "budget_max_micro": 1}, "tag", "Tag '-lead' is not valid"),
        ({"tag": "x" * 65, "budget_max_micro": 1}, "tag", "is not valid"),
        ({"tag": "ok", "budget_max_micro": -1}, "budget_max_micro", "greater than or equal"),
        ({"tag": "ok"}, "budget_max_micro", "required"),
        ({"tag": "ok", "budget_max_micro": 1, "budget_period": "weekly"}, "budget_period", ""),
    ],
)
def test_a_bad_tag_or_budget_is_refused(body, field, message):
    tenant = make_tenant()
    refused = create(client_for(tenant), **body)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"].startswith(f"{field}: ")
    assert message in refused.json()["error"]["message"]
    assert not TagBudget.objects.exists()


def test_a_tag_has_one_budget_per_account_and_accounts_do_not_see_each_other():
    mine, theirs = make_tenant(), make_tenant()
    client = client_for(mine)
    row_id = create(client, tag="shared", budget_max_micro=10).json()["id"]
    again = create(client, tag="SHARED", budget_max_micro=20)
    assert (again.status_code, again.json()["error"]["message"]) == (
        400,
        "tag: Tag 'shared' has a budget already.",
    )
    other = client_for(theirs)
    assert create(other, tag="shared", budget_max_micro=30).status_code == 201  # its own
    assert other.get(f"/api/tag-budgets/{row_id}").status_code == 404
    assert other.patch(f"/api/tag-budgets/{row_id}", {}, format="json").status_code == 404
    assert other.delete(f"/api/tag-budgets/{row_id}").status_code == 404
    assert [r["budget_max_micro"] for r in other.get("/api/tag-budgets").json()["results"]] == [30]


def test_viewers_may_read_but_not_write_tag_budgets():
    tenant = make_tenant()
    client = client_for(tenant)
    row_id = create(client, tag="t", budget_max_micro=10).json()["id"]
    Membership.objects.filter(account_id=tenant.account_id).update(role=Membership.Role.VIEWER)

    assert client.get(f"/api/tag-budgets/{row_id}").status_code == 200
    assert create(client, tag="u", budget_max_micro=10).status_code == 403
    patched = client.patch(f"/api/tag-budgets/{row_id}", {"budget_max_micro": 1}, format="json")
    assert (patched.status_code, patched.json()["error"]["code"]) == (403, "LM-1003")
    assert client.delete(f"/api/tag-budgets/{row_id}").status_code == 403
    assert TagBudget.objects.get(pk=row_id).budget_max_micro == 10
