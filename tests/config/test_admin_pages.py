"""Every page of the operator's admin opens, and every amount on it is in dollars: columns and
read-only fields show cents (all digits in a tooltip), inputs take "7.50" as seven dollars
fifty. Storage stays micro-USD."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiKey, Group
from billing.models import SpendHold, Wallet
from tests.support.tenants import make_tenant
from tests.support.usage import attempt, journal_row, store
from usage.models import UsageLog

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_superuser("root", "root@example.invalid", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_every_page_opens_searches_filters_and_shows_no_secret(operator):
    tenant = make_tenant(wallet_micro=1_250_000, budget_micro=5_000_000)
    store(  # a usage row with its attempt: the log's page shows its attempt trail
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            provider_cost_micro=2_520,
            attempts=[attempt()],
        )
    )
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    secrets = [tenant.api_key, key.key_hash, tenant.api_token]
    opened = []
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        assert model_admin.search_fields, f"{meta.label}: no search"
        assert model_admin.list_filter, f"{meta.label}: no filters"
        pages = [operator.get(changelist), operator.get(changelist, {"q": "1"})]
        first = model.objects.order_by("pk").first()
        if first is not None:
            url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[first.pk])
            pages.append(operator.get(url))
        for page in pages:
            assert page.status_code == 200, (meta.label, page.content[:500])
            html = page.content.decode()
            assert not [s for s in secrets if s in html], meta.label
        opened.append(meta.label)
    assert {"billing.Wallet", "accounts.Group", "billing.LedgerEntry"} <= set(opened)
    log = UsageLog.objects.get(group_id=tenant.group_id)
    detail = operator.get(f"/django-admin/usage/usagelog/{log.pk}/change/").content.decode()
    assert "$0.00252" in detail  # a read-only page's money is in dollars too


def test_money_columns_show_cents_with_every_digit_in_the_tooltip(operator):
    tenant = make_tenant(wallet_micro=1_234_567)

    page = operator.get("/django-admin/billing/wallet/").content.decode()

    assert '<td class="field-balance_micro_usd"><span title="$1.234567">$1.23</span></td>' in page
    assert '<th scope="col" class="sortable column-balance_micro_usd">' in page
    assert "Balance (USD)" in page or "balance (USD)" in page
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    detail = operator.get(f"/django-admin/billing/wallet/{wallet.pk}/change/").content.decode()
    assert '<span title="$1.234567">$1.23</span>' in detail
    assert "1234567" not in detail


def test_a_budget_is_typed_in_dollars_and_stored_in_micro_usd(operator):
    tenant = make_tenant(budget_micro=5_000_000)
    url = f"/django-admin/accounts/group/{tenant.group_id}/change/"

    form = operator.get(url).content.decode()
    assert re.search(r'name="budget_max_micro" value="5.00"', form), form
    fields = {
        name: value
        for name, value in re.findall(r'name="(\w+)" value="([^"]*)"', form)
        if name != "csrfmiddlewaretoken"
    }
    selects = {
        name: re.search(r'<option value="([^"]*)" selected', options).group(1)
        for name, options in re.findall(r'<select name="(\w+)"[^>]*>(.*?)</select>', form, re.S)
    }

    saved = operator.post(url, {**fields, **selects, "budget_max_micro": "7.50"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert Group.objects.get(pk=tenant.group_id).budget_max_micro == 7_500_000

    refused = operator.post(url, {**fields, **selects, "budget_max_micro": "7.5000001"})
    assert refused.status_code == 200
    assert "An amount has at most six decimals (one micro-dollar)." in refused.content.decode()
    assert Group.objects.get(pk=tenant.group_id).budget_max_micro == 7_500_000


def test_wallets_are_filtered_by_what_they_have_available(operator):
    empty, low, funded = (make_tenant(wallet_micro=m) for m in (0, 999_999, 1_000_000))

    def listed(value: str) -> set[int]:
        page = operator.get("/django-admin/billing/wallet/", {"available": value})
        ids = re.findall(r'name="_selected_action" value="(\d+)"', page.content.decode())
        return {Wallet.objects.get(pk=int(i)).account_id for i in ids}

    assert listed("none") == {empty.account_id}
    assert listed("low") == {low.account_id}
    assert listed("funded") == {funded.account_id}


def test_the_ledger_is_searched_by_the_operator_who_wrote_an_entry(operator):
    from billing.services import wallet_credit

    tenant = make_tenant(wallet_micro=100)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    entry = wallet_credit(wallet=wallet, amount_micro=5, reason="goodwill", actor="alice")

    page = operator.get("/django-admin/billing/ledgerentry/", {"q": "alice"}).content.decode()

    assert re.findall(r'<td class="field-actor">([^<]*)</td>', page) == ["alice"]
    assert f"/django-admin/billing/ledgerentry/{entry.pk}/change/" in page


def test_a_hold_names_its_requests_key_and_whether_it_reserved_on_it(operator):
    tenant = make_tenant(wallet_micro=1_000_000)
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    expires = timezone.now() + timedelta(minutes=5)
    # The key without a budget: named as the request's, not reserved on.
    SpendHold.objects.create(
        request_id="req-unbudgeted", group_id=tenant.group_id, request_key=key,
        amount_micro=1_500, expires_at=expires,
    )  # fmt: skip
    page = operator.get("/django-admin/billing/spendhold/").content.decode()
    row = re.search(r"<tr>.*?req-unbudgeted.*?</tr>", page, re.S).group(0)
    assert f">{key}<" in row
    assert 'alt="False"' in row  # reserved on the key: no
    assert "$0.0015" in row


def test_tag_budgets_and_their_spend_are_listed_in_dollars_and_read_only(operator):
    from billing.models import TagBudget, TagSpend

    tenant = make_tenant()
    budget = TagBudget.objects.create(
        account_id=tenant.account_id, tag="customer-42", budget_max_micro=7_500_000
    )
    spend = TagSpend.objects.create(
        account_id=tenant.account_id, tag="customer-42", period="2026-12", spent_micro=2_520
    )
    for model, row, amount in ((TagBudget, budget, "$7.50"), (TagSpend, spend, "$0.00")):
        name = model._meta.model_name
        listed = operator.get(f"/django-admin/billing/{name}/", {"q": "customer-42"})
        assert listed.status_code == 200 and amount in listed.content.decode()
        assert operator.get(f"/django-admin/billing/{name}/add/").status_code == 403
        page = operator.get(f"/django-admin/billing/{name}/{row.pk}/change/").content.decode()
        assert "customer-42" in page and "<form" in page and 'name="_save"' not in page
