"""Money reads consistently (docs/money-and-limits.md, "Money for humans"): a balance beside
sub-cent amounts shows their digits, and a top-up's confirmation says what its result says."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from accounts.models import Membership
from billing.ledger.wallet import commit_reservations, reserve
from billing.models import LedgerEntry, Reservation, Wallet
from core.sqlexec import run_sync
from tests.support.tenants import Tenant, make_tenant

pytestmark = pytest.mark.django_db


def hold(tenant: Tenant, request_id: str, amount_micro: int = 10_000) -> int:
    """Reserve `amount_micro` of the wallet for a request in flight."""
    return run_sync(
        reserve(
            account_id=tenant.account_id,
            request_id=request_id,
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            attempt_no=1,
            amount_micro=amount_micro,
            now=timezone.now(),
            ttl_s=60,
        )
    )


def charge(tenant: Tenant, request_id: str, cost_micro: int) -> None:
    """Hold a cent for a request and commit it at `cost_micro`: one wallet entry."""
    reservation_id = hold(tenant, request_id)
    assert Reservation.objects.filter(pk=reservation_id).exists()
    run_sync(commit_reservations({reservation_id: (request_id, cost_micro)}, now=timezone.now()))


def cells(html: str, css_class: str) -> list[str]:
    """The text of every ledger cell of a class (a tooltip's span unwrapped)."""
    found = re.findall(rf'<td class="[^"]*\b{css_class}\b[^"]*">(.*?)</td>', html)
    return [re.sub(r"<[^>]+>", "", cell) for cell in found]


def test_the_ledger_balance_moves_by_each_sub_cent_debit_row_by_row():
    tenant = make_tenant(wallet_micro=100_000_000)
    for n in range(24):
        charge(tenant, f"tiny-{n}", 6)
    owner = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    client = Client()
    client.force_login(owner)

    html = client.get(f"/dashboard/{tenant.account_id}/wallet/").content.decode()

    amounts, balances = cells(html, "amount"), cells(html, "balance-after")
    assert len(amounts) == len(balances) == 25  # newest first, the opening top-up last
    assert amounts[:24] == ["-$0.000006"] * 24 and amounts[24] == "$100.000000"
    assert balances[0] == "$99.999856" and balances[-2:] == ["$99.999994", "$100.000000"]
    # Each row's balance is the next older one's plus its amount, as they read.
    read = [int(b.replace("$", "").replace(".", "")) for b in balances]
    assert [newer - older for newer, older in pairwise(read)] == [-6] * 24
    tile = html.split('id="balance">')[1].split("</p>")[0]
    assert tile == "$99.999856"  # the balance beside those amounts, at their precision


def test_a_ledger_of_whole_cents_reads_in_cents():
    tenant = make_tenant(wallet_micro=5_000_000)
    charge(tenant, "cents", 10_000)
    owner = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    client = Client()
    client.force_login(owner)

    html = client.get(f"/dashboard/{tenant.account_id}/wallet/").content.decode()

    assert cells(html, "amount") == ["-$0.01", "$5.00"]
    assert cells(html, "balance-after") == ["$4.99", "$5.00"]


def test_a_top_up_confirms_the_balance_its_result_then_reports():
    """The issue's case: a balance of $99.999762 (cents read $100.00), topped up by $5.00."""
    tenant = make_tenant(wallet_micro=100_000_000)
    charge(tenant, "spent", 238)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    operator = get_user_model().objects.create_superuser("op", "op@example.invalid", "pw")
    client = Client()
    client.force_login(operator)
    typed = {"kind": "topup", "amount": "5.00", "reason": "invoice 43 paid"}
    selected = {"action": "credit", "_selected_action": [wallet.pk]}

    review = client.post("/django-admin/billing/wallet/", {**selected, "preview": "1", **typed})
    row = re.search(r'<tr data-wallet="\d+">(.*?)</tr>', review.content.decode()).group(1)
    now, after = re.findall(r"<td>(.*?)</td>", row)[1:]
    done = client.post("/django-admin/billing/wallet/", {**selected, "apply": "1", **typed})

    assert (now, after) == ("$99.999762", "$104.999762")
    entry = LedgerEntry.objects.filter(wallet=wallet).order_by("-id").first()
    assert entry.balance_after_micro == 104_999_762
    [said] = [str(m) for m in get_messages(done.wsgi_request)]
    assert said == (
        f"Topped up {wallet.account}'s wallet by $5.00: balance now {after}"
        f" (ledger entry {entry.pk})."
    )


def test_the_admin_shows_a_balance_beside_a_sub_cent_hold_with_its_digits():
    tenant = make_tenant(wallet_micro=1_234_567)
    hold(tenant, "in-flight", 2_520)
    operator = get_user_model().objects.create_superuser("op", "op@example.invalid", "pw")
    client = Client()
    client.force_login(operator)

    page = client.get(f"/django-admin/accounts/account/{tenant.account_id}/change/")

    shown = " ".join(re.sub(r"<[^>]+>", " ", page.content.decode()).split()).replace(" ,", ",")
    # The hold shows five decimals, so do the balance and what is available (every digit in
    # their tooltips): they visibly move by it.
    assert "balance $1.23457, held by requests in flight $0.00252, available $1.23205" in shown
