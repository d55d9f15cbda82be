"""Every page of the operator's admin opens, and every amount on it is in dollars: columns and
read-only fields show cents (all digits in a tooltip), inputs take "7.50" as seven dollars
fifty. Storage stays micro-USD."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from accounts.models import Group
from billing.models import Wallet
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_superuser("root", "root@example.invalid", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_every_changelist_and_change_page_opens(operator):
    make_tenant(wallet_micro=1_250_000, budget_micro=5_000_000)
    opened = []
    for model in admin.site._registry:
        meta = model._meta
        listing = operator.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        assert listing.status_code == 200, (meta.label, listing.content[:500])
        first = model.objects.order_by("pk").first()
        if first is not None:
            url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[first.pk])
            page = operator.get(url)
            assert page.status_code == 200, (meta.label, page.content[:500])
        opened.append(meta.label)
    assert {"billing.Wallet", "accounts.Group", "billing.LedgerEntry"} <= set(opened)


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
