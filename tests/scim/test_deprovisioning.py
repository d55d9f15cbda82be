"""Deprovisioning through a real gateway process: `active: false` or DELETE ends the person's
dashboard sessions and revokes their tenant API tokens before the SCIM answer returns.

Sessions are database sessions and tenant tokens are looked up per request, with no cache in
any process; so what holds for the gateway serving the SCIM call holds for a second one."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth import get_user_model

from accounts.models import Account, Membership, TenantToken
from accounts.tokens import tenant_token_create
from scim.models import SignedInSession
from scim.tokens import scim_token_issue
from tests.config.admin_client import csrf_token
from tests.support.services import delete_redis_keys

PASSWORD = "a long pass phrase for tests"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


def sign_in(url: str, username: str) -> httpx.Client:
    """Sign into the dashboard as a browser does; return the client holding the session."""
    browser = httpx.Client(base_url=url, timeout=15)
    page = browser.get("/login/")
    answer = browser.post(
        "/login/",
        data={
            "csrfmiddlewaretoken": csrf_token(page.text),
            "username": username,
            "password": PASSWORD,
        },
    )
    assert (answer.status_code, answer.headers["location"]) == (302, "/dashboard/")
    return browser


@pytest.mark.parametrize(
    ("how", "elsewhere"), [("active_false", False), ("delete", False), ("delete", True)]
)
def test_deprovisioning_ends_sessions_and_tokens_on_two_gateways_before_it_answers(
    stack, spawn_gateway, how, elsewhere
):
    delete_redis_keys("tollgate:login:*")  # earlier tests' wrong tokens from this address
    second = spawn_gateway()
    tenant = stack.tenant()
    account = Account.objects.get(pk=tenant.account_id)
    _, scim_secret = scim_token_issue(account=account)
    directory = httpx.Client(
        base_url=f"{stack.url}/scim/v2",
        headers={"Authorization": f"Bearer {scim_secret}"},
        timeout=15,
    )
    created = directory.post(
        "/Users", json={"schemas": [USER], "userName": "grace@example.com", "externalId": "s-9"}
    )
    assert created.status_code == 201, created.text
    person = get_user_model().objects.get(pk=int(created.json()["id"]))
    person.set_password(PASSWORD)  # as the person would through their set-password link
    person.save()
    _, token = tenant_token_create(user=person)
    if elsewhere:  # an operator also made them a member of another account
        other = Account.objects.get(pk=stack.tenant().account_id)
        Membership.objects.create(account=other, user=person, role=Membership.Role.VIEWER)
    overview = f"/dashboard/{account.pk}/"
    browsers = [sign_in(url, person.username) for url in (stack.url, second.url)]
    apis = [
        httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=15)
        for url in (stack.url, second.url)
    ]
    for browser, api in zip(browsers, apis, strict=True):
        assert browser.get(overview).status_code == 200
        assert api.get("/api/account").status_code == 200
    assert SignedInSession.objects.filter(user=person).count() == 2

    if how == "delete":
        answer = directory.delete(f"/Users/{person.pk}")
        assert answer.status_code == 204
    else:
        answer = directory.patch(
            f"/Users/{person.pk}",
            json={
                "schemas": [PATCH_OP],
                "Operations": [{"op": "replace", "value": {"active": False}}],
            },
        )
        assert (answer.status_code, answer.json()["active"]) == (200, False)

    for browser, api in zip(browsers, apis, strict=True):
        signed_out = browser.get(overview)
        assert (signed_out.status_code, signed_out.headers["location"]) == (
            302,
            f"/login/?next={overview}",
        )
        refused = api.get("/api/account")
        assert (refused.status_code, refused.json()["error"]["code"]) == (401, "LM-1001")
    left = Membership.objects.filter(user=person)
    assert list(left.values_list("account_id", flat=True)) == ([other.pk] if elsewhere else [])
    assert TenantToken.objects.get(user=person).revoked_at is not None
    assert SignedInSession.objects.filter(user=person).count() == 0
    person.refresh_from_db()
    # Deactivated only when no other account has them: then their sessions ended by their
    # recorded keys alone, the user still active.
    assert person.is_active is elsewhere
