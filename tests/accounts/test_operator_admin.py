"""The operator's account page and its actions, through the admin a running gateway serves:
the overview reads the account's wallet, money in flight, spend, groups and keys in dollars
and never a secret; suspending refuses every key of the account at once with LM-1004 (on
every replica: the write returns after they applied it), resuming serves them again."""

from __future__ import annotations

import re

import openai
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.models import Account, ApiKey
from billing.ledger.wallet import reserve
from core.sqlexec import run_sync
from tests.config.admin_client import admin_login, csrf_token
from tests.support.services import requires_redis

PASSWORD = "an-operator-password-for-tests"
HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def operator(stack):
    get_user_model().objects.create_superuser("ops", "ops@example.invalid", PASSWORD)
    return admin_login(stack.url, username="ops", password=PASSWORD)


def act(operator, action: str, account_id: int, **fields) -> str:
    """Run a changelist action on one account as the browser does; return the page after."""
    listing = operator.get("/django-admin/accounts/account/")
    data = {
        "csrfmiddlewaretoken": csrf_token(listing.text),
        "action": action,
        "_selected_action": [str(account_id)],
        **fields,
    }
    answer = operator.post("/django-admin/accounts/account/", data=data, follow_redirects=True)
    assert answer.status_code == 200, answer.text[:500]
    return answer.text


@requires_redis
def test_a_suspended_accounts_keys_are_refused_at_once_and_served_again_on_resume(
    stack, operator, spawn_gateway
):
    other = spawn_gateway()
    tenant = stack.tenant()
    clients = [
        stack.openai(tenant),
        openai.OpenAI(base_url=f"{other.url}/v1", api_key=tenant.api_key, max_retries=0),
    ]
    for client in clients:  # both replicas hold the key in memory
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    confirm = act(operator, "suspend", tenant.account_id)
    assert 'name="reason"' in confirm and "refused with LM-1004" in confirm
    assert Account.objects.get(pk=tenant.account_id).suspended_at is None  # not yet confirmed
    done = act(operator, "suspend", tenant.account_id, apply="1", reason="invoice overdue")
    assert "its keys are refused (LM-1004) on every replica" in done

    for client in clients:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
        assert refused.value.body == {
            "message": "This account is suspended by the gateway's operator: its keys are"
            " refused until it is resumed. Ask the operator.",
            "type": "permission_error",
            "code": "LM-1004",
        }
    calls_while_suspended = len(stack.stub.vendor_calls())

    assert "its keys are served again" in act(operator, "resume", tenant.account_id)
    for client in clients:
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert len(stack.stub.vendor_calls()) == calls_while_suspended + 2
    assert calls_while_suspended == 2  # the two before the suspension, none during it


def test_the_account_page_shows_wallet_money_in_flight_groups_and_keys_in_dollars(stack, operator):
    tenant = stack.tenant(wallet_micro=12_345_678, budget_micro=5_000_000)
    run_sync(
        reserve(
            account_id=tenant.account_id,
            request_id="in-flight-1",
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            attempt_no=1,
            amount_micro=250_000,
            now=timezone.now(),
            ttl_s=60,
        )
    )

    page = operator.get(f"/django-admin/accounts/account/{tenant.account_id}/change/").text

    text = re.sub(r"<[^>]+>", "", page)
    assert "balance $12.35, held by requests in flight $0.25, available $12.10" in text
    assert "0 budget hold(s) of $0.00; 1 wallet reservation(s) of $0.25" in text
    group = re.search(r'<table class="overview">.*?</table>', page, re.S).group(0)
    assert re.findall(r"<td>([^<]*)</td>", group)[1:] == ["$5.00", "$0.00", "$0.00", "$0.00"]
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert f"{key.prefix}…" in page
    assert tenant.api_key not in page and key.key_hash not in page
    assert tenant.api_token not in page
