"""One of the caller's accounts, chosen one way (accounts.selectors.account_of_user) by every
tenant route that takes `?account=`: the signed heads, the receipts and their statement.

A user in two accounts (an owner of the first, a viewer of the second) and a stranger's
account: without `account` the first (lowest id) answers; with one, that account; the
stranger's is a 404 that confirms nothing; the audit head is for owners and admins only.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.models import Membership
from accounts.selectors import account_of_user
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db
ROUTES = ("/api/receipts/head", "/api/audit/head", "/api/receipts", "/api/receipts/statement")


@pytest.fixture
def two_accounts():
    """(user's tenant, their second account's tenant, a stranger's tenant): the user owns the
    first and is a viewer of the second."""
    mine, second, theirs = make_tenant(), make_tenant(), make_tenant()
    user = Membership.objects.get(account_id=mine.account_id).user
    Membership.objects.create(account_id=second.account_id, user=user, role=Membership.Role.VIEWER)
    return mine, second, theirs


def test_the_selector_answers_the_named_account_or_the_first_and_none_for_others(
    two_accounts,
):
    mine, second, theirs = two_accounts
    user = Membership.objects.get(account_id=mine.account_id, role="owner").user
    stranger = Membership.objects.get(account_id=theirs.account_id).user
    Membership.objects.filter(user=stranger).delete()

    assert account_of_user(user=user).pk == mine.account_id
    assert account_of_user(user=user, account_id=None).pk == mine.account_id
    assert account_of_user(user=user, account_id=second.account_id).pk == second.account_id
    assert account_of_user(user=user, account_id=theirs.account_id) is None
    assert account_of_user(user=stranger) is None


def test_every_route_answers_the_named_account_or_the_first(two_accounts):
    mine, second, _ = two_accounts
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {mine.api_token}")

    for route in ROUTES:
        first = client.get(route)
        assert (first.status_code, first.json()["account_id"]) == (200, mine.account_id), route
    for route in ("/api/receipts/head", "/api/receipts", "/api/receipts/statement"):
        named = client.get(route, {"account": second.account_id})
        assert (named.status_code, named.json()["account_id"]) == (200, second.account_id)
    # A viewer of the second account reads its receipts, not its audit trail's head.
    refused = client.get("/api/audit/head", {"account": second.account_id})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "LM-1003")


def test_a_strangers_account_is_404_on_every_route(two_accounts):
    mine, _, theirs = two_accounts
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {mine.api_token}")

    for route in ROUTES:
        answer = client.get(route, {"account": theirs.account_id})
        assert answer.status_code == 404, route
        assert answer.json()["error"]["code"] == "LM-2004", route
        assert str(theirs.account_id) not in answer.content.decode(), route
