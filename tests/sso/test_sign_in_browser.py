"""Single sign-on in a real browser (Debian's Chromium via Playwright) against the real
OpenID provider: the login page's "Sign in with …" at a desktop and a phone width, the
operators' button on the admin's login, an owner's settings page with its link step, and the
refusals of a wrong audience, an expired token and a replayed code.

Screenshots go to $TEST_ARTIFACTS_DIR/sso (default var/test-artifacts/sso), not committed.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest

from accounts.models import Membership
from sso.models import IdentityLink, Provider
from tests.sso.conftest import PASSWORD, TENANT_CLIENT
from tests.support.a11y import summary, violations
from tests.support.browser import ARTIFACTS, DESKTOP, PHONE, open_page, requires_chromium
from tests.support.browser import browser as browser  # noqa: PLC0414  (a fixture)

pytestmark = requires_chromium


@pytest.fixture(params=[DESKTOP, PHONE], ids=["desktop", "phone"])
def page(browser, request):
    tab = open_page(browser, ARTIFACTS / "sso" / request.node.name, viewport=request.param)
    yield tab
    tab.shot("last")
    tab.context.close()


def sign_in_at_provider(page, username: str) -> None:
    page.wait_for_selector("#op-login")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("#op-submit")


def test_sign_in_with_the_provider_lands_a_new_member_on_the_dashboard(sso, page):
    account = sso.acme()
    page.goto(f"{sso.url}/login/")
    assert not violations(page), summary(violations(page))
    page.shot("1-login")
    page.fill("#sso-email", "ana@acme.test")
    page.click('#sso-sign-in button[type="submit"]')
    page.click('text="Sign in with Acme IdP"')
    sign_in_at_provider(page, "ana")
    page.wait_for_url(f"{sso.url}/dashboard/{account.pk}/")
    page.shot("2-dashboard")
    assert "admin" in page.inner_text(".who .user")  # the groups claim's role
    user = IdentityLink.objects.get(subject="ana-sub").user

    # The provider changes the email; the next sign-in (the direct link) is the same person.
    page.click('button:has-text("Sign out")')
    claims = {**sso.op.config["users"]["ana"]["claims"], "email": "ana.renamed@acme.test"}
    sso.op.set_user("ana", claims=claims)
    page.goto(f"{sso.url}/login/sso/{account.pk}/")  # the provider still knows this browser
    page.wait_for_url(f"{sso.url}/dashboard/{account.pk}/")
    user.refresh_from_db()
    assert user.email == "ana.renamed@acme.test"
    assert IdentityLink.objects.get(subject="ana-sub").user_id == user.pk
    assert Membership.objects.filter(account=account).count() == 2  # the owner and ana


def test_a_refused_sign_in_says_why(sso, page):
    account = sso.acme()
    page.goto(f"{sso.url}/login/sso/{account.pk}/")
    sign_in_at_provider(page, "cy")
    page.wait_for_selector("#sso-refused")
    assert "cy@other.test is not in a domain" in page.inner_text("#sso-refused")
    assert not violations(page), summary(violations(page))
    page.goto(f"{sso.url}/dashboard/")
    assert page.url.startswith(f"{sso.url}/login/")


def test_the_operator_signs_in_to_the_admin_with_its_button(sso, page):
    page.goto(f"{sso.url}/django-admin/login/")
    page.shot("1-admin-login")
    page.click('#operator-sso:has-text("Sign in with Operator IdP")')
    sign_in_at_provider(page, "root")
    page.wait_for_url(f"{sso.url}/django-admin/")
    assert "Operator records" in page.content()


def test_an_owner_sets_sso_up_links_themselves_and_turns_passwords_off(sso, page):
    account = sso.acme(enabled=False)
    Provider.objects.filter(account=account).delete()  # set up from the page, from nothing
    owner = Membership.objects.get(account=account, role="owner").user
    owner.set_password(PASSWORD)
    owner.save()
    page.goto(f"{sso.url}/login/")
    page.fill("input[name=username]", owner.username)
    page.fill("input[name=password]", PASSWORD)
    page.click('#sign-in button[type="submit"]')
    page.wait_for_url(f"{sso.url}/dashboard/{account.pk}/")

    page.goto(f"{sso.url}/dashboard/{account.pk}/sso/")
    assert not violations(page), summary(violations(page))
    page.fill("input[name=display_name]", "Acme IdP")
    page.fill("input[name=issuer]", sso.op.issuer)
    page.fill("input[name=client_id]", TENANT_CLIENT["client_id"])
    page.fill("input[name=client_secret]", TENANT_CLIENT["client_secret"])
    page.fill("input[name=jit_domains]", "acme.test")
    page.check("input[name=enabled]")
    page.uncheck("input[name=password_sign_in]")
    page.click('#sso-settings button[type="submit"]')
    # Not yet: no owner signs in through the provider.
    assert "Password sign-in stays on" in page.inner_text("#sso-settings")
    page.check("input[name=password_sign_in]")
    page.fill("input[name=client_secret]", TENANT_CLIENT["client_secret"])
    page.click('#sso-settings button[type="submit"]')
    page.wait_for_selector("text=Single sign-on settings saved.")
    page.shot("1-saved")

    page.click("#sso-link-me")
    sign_in_at_provider(page, "olly")
    page.wait_for_selector("#sso-linked")
    assert IdentityLink.objects.get(subject="olly-sub").user_id == owner.pk

    page.uncheck("input[name=password_sign_in]")
    page.click('#sso-settings button[type="submit"]')
    page.wait_for_selector("text=Single sign-on settings saved.")
    assert Provider.objects.get(account=account).password_sign_in is False
    page.shot("2-passwords-off")

    page.click('button:has-text("Sign out")')
    page.goto(f"{sso.url}/login/")
    page.fill("input[name=username]", owner.username)
    page.fill("input[name=password]", PASSWORD)
    page.click('#sign-in button[type="submit"]')
    assert "signs in with single sign-on only" in page.inner_text("#sign-in")
    assert page.url.startswith(f"{sso.url}/login/")


@pytest.mark.parametrize(
    ("username", "reason"), [("dee", "aud"), ("eve", "expired")], ids=["audience", "expired"]
)
def test_a_token_for_another_audience_or_expired_is_refused_in_the_browser(
    sso, page, username, reason
):
    account = sso.acme()
    page.goto(f"{sso.url}/login/sso/{account.pk}/")
    sign_in_at_provider(page, username)
    page.wait_for_selector("#sso-refused")
    assert page.get_attribute("#sso-refused", "data-reason") == reason
    assert not IdentityLink.objects.exists()
    page.goto(f"{sso.url}/dashboard/")
    assert page.url.startswith(f"{sso.url}/login/")  # no session


def test_a_replayed_code_is_refused_in_the_browser(sso, page, browser):
    account = sso.acme()
    callbacks: list[str] = []
    page.on(
        "request",
        lambda r: callbacks.append(r.url) if "/login/sso/callback/" in r.url else None,
    )
    page.goto(f"{sso.url}/login/sso/{account.pk}/")
    sign_in_at_provider(page, "olly")
    page.wait_for_url(f"{sso.url}/dashboard/{account.pk}/")
    [callback] = callbacks

    page.goto(callback)  # the same browser again: its state worked once
    page.wait_for_selector("#sso-refused")
    assert page.get_attribute("#sso-refused", "data-reason") == "state"

    # Another browser with a sign-in of its own started: the provider refuses the used code.
    other = open_page(browser, ARTIFACTS / "sso" / "replay-thief", viewport=DESKTOP)
    try:
        other.goto(f"{sso.url}/login/sso/{account.pk}/")
        other.wait_for_selector("#op-login")  # at the provider, this browser's state issued
        # The provider's login page carries the authorize request (state included) in `next`.
        [state] = re.findall(r"[?&]state=([^&]+)", unquote(other.url))
        [code] = re.findall(r"[?&]code=([^&]+)", callback)
        other.goto(f"{sso.url}/login/sso/callback/?code={code}&state={state}")
        other.wait_for_selector("#sso-refused")
        assert other.get_attribute("#sso-refused", "data-reason") == "code"
        other.goto(f"{sso.url}/dashboard/")
        assert other.url.startswith(f"{sso.url}/login/")
    finally:
        other.context.close()
