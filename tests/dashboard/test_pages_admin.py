"""The operator's admin reads as Tollgate's: branded, one label per model, a wallet's page has
its own Top up button whose top-up shows in "Recent actions", and the markup is a percentage
(stored in basis points)."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry

from accounts.models import Account
from billing.models import LedgerEntry, Wallet
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


def test_the_admin_is_branded_tollgate_and_lists_each_model_under_its_own_name(operator):
    html = operator.get("/django-admin/").content.decode()

    assert "Django administration" not in html and "Django site admin" not in html
    assert "<title>Operator records | Tollgate admin</title>" in html
    assert "Tollgate operator admin" in html
    names = re.findall(r'<th scope="row" id="[\w-]+">\s*<a href="[^"]+">([^<]+)</a>', html)
    assert "Key groups" in names and "Staff permission groups" in names
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_a_wallets_page_tops_it_up_and_the_admin_history_shows_it(operator):
    tenant = make_tenant(wallet_micro=1_000_000)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    change = f"/django-admin/billing/wallet/{wallet.pk}/change/"
    page = operator.get(change).content.decode()
    top_up = f"/django-admin/billing/wallet/{wallet.pk}/top-up/"
    assert f'<a href="{top_up}" id="wallet-top-up">Top up or adjust</a>' in page

    form = operator.get(top_up)
    assert form.status_code == 200 and 'id="wallet-credit"' in form.content.decode()
    fields = {"kind": "topup", "amount": "2.50", "reason": "invoice 9 paid"}
    confirm = operator.post(top_up, {**fields, "preview": "Review"}).content.decode()
    assert 'id="confirm-summary"' in confirm
    done = operator.post(top_up, {**fields, "apply": "yes"})

    assert (done.status_code, done["Location"]) == (302, change)
    entry = LedgerEntry.objects.filter(wallet=wallet).order_by("-id").first()
    assert (entry.amount_micro, entry.actor, entry.reason) == (2_500_000, "root", "invoice 9 paid")
    logged = LogEntry.objects.get(object_id=str(wallet.pk))
    assert logged.get_change_message() == "Topped up by $2.50: invoice 9 paid"
    index = operator.get("/django-admin/").content.decode()
    assert "None available" not in index and f"{wallet}" in index


def test_a_missing_wallet_has_no_top_up_page(operator):
    assert operator.get("/django-admin/billing/wallet/999999/top-up/").status_code == 404


def test_the_markup_is_read_and_typed_as_a_percentage_and_kept_in_basis_points(operator):
    tenant = make_tenant()
    account = Account.objects.get(pk=tenant.account_id)
    url = f"/django-admin/accounts/account/{account.pk}/change/"
    page = operator.get(url).content.decode()
    assert "Markup (% of provider cost)" in page and "basis points" not in page
    assert re.search(r'name="markup_bp" value="100"', page), "10000 bp reads 100 (%)"

    form = {
        "name": account.name,
        "billing_mode": account.billing_mode,
        "bandwidth_price_micro_per_gb": "0.00",
        "markup_bp": "125.5",
        "time_zone": "UTC",
        "budget_alert_pcts": "[50, 80, 100]",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
    }
    saved = operator.post(url, form)

    assert saved.status_code == 302, saved.content.decode()[:2000]
    account.refresh_from_db()
    assert account.markup_bp == 12_550
    assert 'name="markup_bp" value="125.5"' in operator.get(url).content.decode()
    bad = operator.post(url, {**form, "markup_bp": "0"}).content.decode()
    assert "Ensure this value is greater than or equal to 0.01." in bad
