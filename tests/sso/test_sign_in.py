"""Single sign-on against a real OpenID provider, followed with httpx: who a sign-in is,
and every refusal (a wrong audience, a replayed code, an expired token, an unverified or
foreign email, a password where the account requires SSO) leaves no signed-in session."""

from __future__ import annotations

import httpx
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session

from accounts.models import Membership
from audit.models import AuditEntry
from sso.models import IdentityLink
from tests.sso.conftest import PASSWORD, SsoStack, provider_sign_in


def signed_in_sessions() -> int:
    return sum("_auth_user_id" in s.get_decoded() for s in Session.objects.all())


def start(sso: SsoStack, account) -> str:
    return f"{sso.url}/login/sso/{account.pk}/"


def refused(reply: httpx.Response, reason: str) -> None:
    assert reply.status_code == 403, reply.text
    assert f'data-reason="{reason}"' in reply.text, reply.text
    assert signed_in_sessions() == 0


def test_first_sign_in_makes_a_member_with_the_groups_role(sso):
    account = sso.acme()
    with httpx.Client() as client:
        callback = provider_sign_in(client, start(sso, account), "ana")
        reply = client.get(callback)
        assert reply.status_code == 302
        assert reply.headers["location"] == f"/dashboard/{account.pk}/"
        assert client.get(f"{sso.url}/dashboard/{account.pk}/").status_code == 200
    link = IdentityLink.objects.get(issuer=sso.op.issuer, subject="ana-sub")
    assert link.user.email == "ana@acme.test"
    assert not link.user.has_usable_password()
    assert Membership.objects.get(account=account, user=link.user).role == "admin"
    actions = set(AuditEntry.objects.filter(account_id=account.pk).values_list("action", flat=True))
    assert {"sso.link", "member.add"} <= actions


def test_an_email_change_at_the_provider_keeps_the_same_user(sso):
    account = sso.acme()
    with httpx.Client() as client:
        client.get(provider_sign_in(client, start(sso, account), "ana"))
    first = IdentityLink.objects.get(subject="ana-sub").user_id
    # Someone else holds the new address here: an email never finds a person.
    other = get_user_model().objects.create_user(username="squatter", email="ana.new@acme.test")
    sso.op.set_user(
        "ana", claims={**sso.op.config["users"]["ana"]["claims"], "email": "ana.new@acme.test"}
    )
    with httpx.Client() as client:
        assert client.get(provider_sign_in(client, start(sso, account), "ana")).status_code == 302
    link = IdentityLink.objects.get(subject="ana-sub")
    assert link.user_id == first != other.pk
    assert link.user.email == "ana.new@acme.test"
    assert get_user_model().objects.filter(identity_links__isnull=False).count() == 1


def test_a_token_for_another_audience_is_refused(sso):
    account = sso.acme()
    with httpx.Client() as client:
        refused(client.get(provider_sign_in(client, start(sso, account), "dee")), "aud")
    assert not IdentityLink.objects.exists()


def test_an_expired_token_is_refused(sso):
    account = sso.acme()
    with httpx.Client() as client:
        refused(client.get(provider_sign_in(client, start(sso, account), "eve")), "expired")


def test_a_replayed_code_is_refused(sso):
    account = sso.acme()
    with httpx.Client() as victim:
        callback = provider_sign_in(victim, start(sso, account), "olly")
        assert victim.get(callback).status_code == 302  # used once, by its own browser
        # The same browser again: the state worked once.
        assert victim.get(callback).status_code == 403
    Session.objects.all().delete()
    code = httpx.URL(callback).params["code"]
    with httpx.Client() as thief:
        # A browser of its own, with a sign-in of its own started: the provider refuses the
        # used code (and it was never this verifier's).
        reply = thief.get(start(sso, account))
        state = httpx.URL(reply.headers["location"]).params["state"]
        refused(thief.get(f"{sso.url}/login/sso/callback/?code={code}&state={state}"), "code")


def test_an_unverified_email_does_not_join(sso):
    account = sso.acme()
    with httpx.Client() as client:
        refused(client.get(provider_sign_in(client, start(sso, account), "ben")), "unverified")
    assert not get_user_model().objects.filter(email="ben@acme.test").exists()


def test_an_email_outside_the_domains_does_not_join(sso):
    account = sso.acme()
    with httpx.Client() as client:
        refused(client.get(provider_sign_in(client, start(sso, account), "cy")), "domain")
    assert not IdentityLink.objects.exists()


def test_a_callback_without_a_started_sign_in_is_refused(sso):
    refused(httpx.get(f"{sso.url}/login/sso/callback/?code=x&state=forged"), "state")


def test_password_sign_in_is_refused_once_the_account_requires_sso(sso):
    account = sso.acme()
    owner = Membership.objects.get(account=account, role="owner").user
    owner.set_password(PASSWORD)
    owner.save()
    IdentityLink.objects.create(issuer=sso.op.issuer, subject="olly-sub", user=owner)
    from sso.services import provider_save

    provider_save(account=account, actor=None, password_sign_in=False)
    with httpx.Client() as client:
        client.get(f"{sso.url}/login/")
        reply = client.post(
            f"{sso.url}/login/",
            data={
                "username": owner.username,
                "password": PASSWORD,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            headers={"Referer": f"{sso.url}/login/"},
        )
    assert reply.status_code == 200
    assert "signs in with single sign-on only" in reply.text
    assert signed_in_sessions() == 0


def test_password_sign_in_stays_on_until_an_owner_is_linked(sso):
    import pytest

    from sso.services import SettingsRefused, provider_save

    account = sso.acme()
    with pytest.raises(SettingsRefused):
        provider_save(account=account, actor=None, password_sign_in=False)


def test_the_operator_signs_in_to_the_admin(sso):
    with httpx.Client() as client:
        reply = client.get(provider_sign_in(client, f"{sso.url}/login/sso/operator/", "root"))
        assert reply.headers["location"] == "/django-admin/"
        assert client.get(f"{sso.url}/django-admin/").status_code == 200
    operator = IdentityLink.objects.get(subject="operator-root-sub").user
    assert operator.is_staff and operator.is_superuser
    assert operator.username == "root"


def test_someone_not_an_operator_is_refused_at_the_admin(sso):
    with httpx.Client() as client:
        reply = client.get(provider_sign_in(client, f"{sso.url}/login/sso/operator/", "mallory"))
        refused(reply, "not-operator")
        assert client.get(f"{sso.url}/django-admin/").status_code == 302


def scim_provisioned(account, *, external_id: str, active: bool | None = True):
    from scim.models import ScimUser

    user = get_user_model().objects.create_user(username="ana.scim", email="ana@acme.test")
    if active is not False:
        Membership.objects.create(account=account, user=user, role="viewer")
    ScimUser.objects.create(account=account, user=user, external_id=external_id, active=active)
    return user


def test_a_scim_users_first_sign_in_links_to_them_by_external_id(sso):
    account = sso.acme(jit_domains=[])  # nobody joins by domain: SCIM made the member
    user = scim_provisioned(account, external_id="ana-sub", active=None)
    with httpx.Client() as client:
        assert client.get(provider_sign_in(client, start(sso, account), "ana")).status_code == 302
    assert IdentityLink.objects.get(subject="ana-sub").user_id == user.pk
    assert get_user_model().objects.count() == 2  # the owner and the SCIM user, no other
    assert Membership.objects.get(account=account, user=user).role == "admin"  # groups claim


def test_a_user_the_directory_deactivated_is_refused(sso):
    account = sso.acme()
    scim_provisioned(account, external_id="ana-sub", active=False)
    with httpx.Client() as client:
        refused(client.get(provider_sign_in(client, start(sso, account), "ana")), "scim")
    assert not IdentityLink.objects.exists()


def test_each_sign_in_applies_the_groups_role_and_keeps_the_last_owner(sso):
    account = sso.acme()
    account.directory_roles = {"acme-admins": "admin", "acme-viewers": "viewer"}
    account.save(update_fields=["directory_roles"])
    ana = sso.op.config["users"]["ana"]["claims"]

    def sign_in(name: str) -> None:
        with httpx.Client() as client:
            assert (
                client.get(provider_sign_in(client, start(sso, account), name)).status_code == 302
            )

    sign_in("ana")
    member = Membership.objects.get(account=account, user__identity_links__subject="ana-sub")
    assert member.role == "admin"
    sso.op.set_user("ana", claims={**ana, "groups": ["unmapped"]})
    sign_in("ana")
    member.refresh_from_db()
    assert member.role == "admin"  # a claim that maps to nothing changes nothing
    sso.op.set_user("ana", claims={**ana, "groups": ["acme-viewers"]})
    sign_in("ana")
    member.refresh_from_db()
    assert member.role == "viewer"

    # The account's one owner signs in with groups that map to viewer: still the owner.
    owner = Membership.objects.get(account=account, role="owner")
    IdentityLink.objects.create(issuer=sso.op.issuer, subject="olly-sub", user=owner.user)
    olly = sso.op.config["users"]["olly"]["claims"]
    sso.op.set_user("olly", claims={**olly, "groups": ["acme-viewers"]})
    sign_in("olly")
    owner.refresh_from_db()
    assert owner.role == "owner"


def test_the_login_pages_email_finds_the_accounts_button(sso):
    account = sso.acme()
    page = httpx.get(f"{sso.url}/login/sso/", params={"email": "someone@acme.test"}).text
    assert f'href="/login/sso/{account.pk}/"' in page
    assert "Sign in with Acme IdP" in page
    page = httpx.get(f"{sso.url}/login/sso/", params={"email": "someone@elsewhere.test"}).text
    assert 'id="sso-none"' in page
    assert "/login/sso/" + str(account.pk) not in page
