"""Money surfaces: tenant API (wallet, ledger, spend), admin top-up, recorded excess."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.http import HttpResponse
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from billing.ledger.sql import Refused
from billing.ledger.wallet import cancel_reservation, commit_reservations
from billing.ledger.wallet import reserve as ledger_reserve
from billing.models import LedgerEntry, Reservation, Wallet
from core.sqlexec import run_sync
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db


def api(tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


def reserve(tenant, request_id: str, amount_micro: int) -> int:
    return run_sync(
        ledger_reserve(
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


def resolve(reservation_id: int, status: str, cost_micro: int) -> bool:
    if status == "committed":
        request_id = Reservation.objects.get(pk=reservation_id).request_id
        committed = commit_reservations(
            {reservation_id: (request_id, cost_micro)}, now=timezone.now()
        )
        return bool(run_sync(committed))
    return run_sync(cancel_reservation(reservation_id, now=timezone.now(), status=status))


def operator(name: str) -> Client:
    user = get_user_model().objects.create_superuser(name, f"{name}@example.invalid", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_wallet_and_paginated_ledger_are_the_callers_own():
    mine, theirs = make_tenant(wallet_micro=5_000), make_tenant(wallet_micro=7)
    for index in range(3):
        rid = reserve(mine, f"r{index}", 100)
        resolve(rid, "committed", 10 * (index + 1))

    wallet = api(mine).get(f"/api/accounts/{mine.account_id}/wallet").json()
    assert wallet == {
        **wallet,
        "balance_micro": 4_940,
        "reserved_micro": 0,
        "available_micro": 4_940,
    }
    page = api(mine).get(f"/api/accounts/{mine.account_id}/ledger?limit=2").json()
    assert page["count"] == 4
    assert [(e["kind"], e["amount_micro"], e["balance_after_micro"]) for e in page["results"]] == [
        ("commit", -30, 4_940),
        ("commit", -20, 4_970),
    ]
    assert api(mine).get(f"/api/accounts/{theirs.account_id}/wallet").status_code == 404
    assert api(mine).get(f"/api/accounts/{theirs.account_id}/ledger").status_code == 404


def test_group_spend_shows_budget_spent_and_remaining():
    tenant = make_tenant(budget_micro=1_000)
    from accounts.models import Group

    Group.objects.filter(pk=tenant.group_id).update(
        spent_micro=300, reserved_micro=200, settled_micro=250
    )
    spend = api(tenant).get(f"/api/groups/{tenant.group_id}/spend").json()
    assert (
        spend["budget_max_micro"],
        spend["spent_micro"],
        spend["reserved_micro"],
        spend["settled_micro"],
        spend["remaining_micro"],
    ) == (1_000, 300, 200, 250, 500)
    other = make_tenant()
    assert api(other).get(f"/api/groups/{tenant.group_id}/spend").status_code == 404


def test_a_commit_above_the_hold_debits_the_hold_and_collects_the_excess_once():
    tenant = make_tenant(wallet_micro=1_000)
    rid = reserve(tenant, "over", 10)

    resolve(rid, "committed", 15)
    again = resolve(rid, "cancelled", 0)
    resolve(rid, "committed", 15)

    reservation = Reservation.objects.get(pk=rid)
    assert (
        reservation.status,
        reservation.committed_micro,
        reservation.excess_micro,
        reservation.collected_micro,
    ) == ("committed", 10, 5, 5)
    assert again is False  # resolves exactly once
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (985, 0)


def test_reserving_never_takes_available_below_zero():
    tenant = make_tenant(wallet_micro=100)
    reserve(tenant, "a", 60)
    with pytest.raises(Refused):
        reserve(tenant, "b", 41)
    reserve(tenant, "c", 40)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (100, 100)
    assert Reservation.objects.filter(wallet=wallet).count() == 2


def wallet_balance(wallet: Wallet) -> int:
    wallet.refresh_from_db()
    return wallet.balance_micro


def credit(client, wallet_ids: list[int], **fields) -> HttpResponse:
    return client.post(
        "/django-admin/billing/wallet/",
        {"action": "credit", "_selected_action": wallet_ids, **fields},
    )


def test_an_operator_tops_up_in_dollars_confirms_and_the_ledger_says_who():
    tenant = make_tenant(wallet_micro=1_250_000)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    client = operator("op")
    typed = {"kind": "topup", "amount": "5.00", "reason": "invoice 42 paid"}

    form = credit(client, [wallet.pk])
    assert form.status_code == 200 and b'name="amount"' in form.content
    assert b"$1.25" in form.content  # the balance now, in dollars
    review = credit(client, [wallet.pk], preview="1", **typed)
    assert review.status_code == 200
    row = re.search(rb'<tr data-wallet="\d+">(.*?)</tr>', review.content).group(1)
    assert re.findall(rb"<td>(.*?)</td>", row)[1:] == [b"$1.25", b"$6.25"]
    assert wallet_balance(wallet) == 1_250_000  # nothing written before the confirmation

    done = credit(client, [wallet.pk], apply="1", **typed)

    assert done.status_code == 302
    assert wallet_balance(wallet) == 6_250_000
    entry = LedgerEntry.objects.filter(wallet=wallet).order_by("-id").first()
    assert (entry.kind, entry.amount_micro, entry.balance_after_micro) == (
        "topup",
        5_000_000,
        6_250_000,
    )
    assert (entry.reason, entry.actor) == ("invoice 42 paid", "op")
    said = [str(m) for m in get_messages(done.wsgi_request)]
    assert said == [
        f"Topped up {wallet.account}'s wallet by $5.00: balance now $6.25"
        f" (ledger entry {entry.pk})."
    ]


def test_an_adjustment_may_take_money_away_but_never_below_what_is_held():
    tenant = make_tenant(wallet_micro=3_000_000)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    reserve(tenant, "in-flight", 1_000_000)
    client = operator("op")

    refused = credit(
        client, [wallet.pk], apply="1", kind="adjustment", amount="-2.000001", reason="x"
    )
    assert [str(m) for m in get_messages(refused.wsgi_request)] == [
        f"{wallet.account}'s wallet was not changed: -$2.000001 would take it below what its"
        " requests in flight hold."
    ]
    assert wallet_balance(wallet) == 3_000_000

    credit(client, [wallet.pk], apply="1", kind="adjustment", amount="-2", reason="refund")
    assert wallet_balance(wallet) == 1_000_000


@pytest.mark.parametrize(
    "typed, says",
    [
        ({"kind": "topup", "amount": "-5"}, "A top-up adds money"),
        ({"kind": "topup", "amount": "0"}, "must not be zero"),
        ({"kind": "topup", "amount": "5.0000001"}, "at most six decimals"),
        ({"kind": "topup", "amount": "five"}, "is not an amount in dollars"),
    ],
)
def test_a_top_up_that_is_not_one_is_shown_again_with_the_reason(typed, says):
    tenant = make_tenant(wallet_micro=100)
    wallet = Wallet.objects.get(account_id=tenant.account_id)

    page = credit(operator("op"), [wallet.pk], apply="1", reason="r", **typed)

    assert page.status_code == 200 and says in page.content.decode()
    assert wallet_balance(wallet) == 100
    assert LedgerEntry.objects.filter(wallet=wallet).count() == 1  # the opening entry only


def test_operators_can_list_recorded_excess():
    tenant = make_tenant(wallet_micro=1_000)
    rid = reserve(tenant, "over", 10)
    resolve(rid, "committed", 13)
    client = operator("op2")

    page = client.get("/django-admin/billing/reservation/?excess=yes")

    assert page.status_code == 200
    assert b"over" in page.content
