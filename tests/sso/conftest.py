"""Single sign-on tests: a real OpenID provider (django-oauth-toolkit, its own process) and a
gateway process that trusts it for the admin and, per test, for a tenant's account."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx
import pytest

from accounts.models import Account
from sso.models import Provider
from sso.services import provider_save
from tests.support.oidc import OpenIdProvider, start_provider
from tests.support.processes import Gateway, free_port
from tests.support.tenants import make_tenant

PASSWORD = "provider-password-1"
TENANT_CLIENT = {"client_id": "tollgate-acme", "client_secret": "acme-client-secret-0123"}
ADMIN_CLIENT = {"client_id": "tollgate-admin", "client_secret": "admin-client-secret-0123"}
OPERATOR_SUB = "operator-root-sub"


def _user(sub: str, email: str, *, verified: bool = True, groups=(), name="", **hooks) -> dict:
    claims = {"sub": sub, "email": email, "email_verified": verified, "groups": list(groups)}
    if name:
        claims["preferred_username"] = name
    return {"password": PASSWORD, "claims": claims, **hooks}


USERS = {
    "ana": _user("ana-sub", "ana@acme.test", groups=["acme-admins"]),
    "ben": _user("ben-sub", "ben@acme.test", verified=False),
    "cy": _user("cy-sub", "cy@other.test"),
    "dee": _user("dee-sub", "dee@acme.test", aud="another-client"),
    "eve": _user("eve-sub", "eve@acme.test", exp_offset_s=-600),
    "olly": _user("olly-sub", "olly@acme.test"),
    "root": _user(OPERATOR_SUB, "root@operator.test", name="root"),
    "mallory": _user("mallory-sub", "mallory@operator.test"),
}


@dataclass
class SsoStack:
    gateway: Gateway
    op: OpenIdProvider

    @property
    def url(self) -> str:
        return self.gateway.url

    def acme(self, **rules) -> Account:
        """A tenant account whose provider is the test provider, admitting acme.test."""
        account = Account.objects.get(pk=make_tenant().account_id)
        account.directory_roles = {"acme-admins": "admin"}
        account.save(update_fields=["directory_roles"])
        fields = {
            "issuer": self.op.issuer,
            "client_id": TENANT_CLIENT["client_id"],
            "display_name": "Acme IdP",
            "jit_domains": ["acme.test"],
            "jit_role": Provider.JitRole.VIEWER,
            "groups_claim": "groups",
            "enabled": True,
            "password_sign_in": True,
        }
        provider_save(
            account=account,
            actor=None,
            client_secret=TENANT_CLIENT["client_secret"],
            **{**fields, **rules},
        )
        return account


@pytest.fixture(scope="module")
def sso_stack(module_gateways, tmp_path_factory) -> Iterator[SsoStack]:
    op_port = free_port()
    issuer = f"http://127.0.0.1:{op_port}/o"
    gateway = module_gateways(
        TOLLGATE_SSO_ALLOW_HTTP="true",
        # The test provider is on 127.0.0.1: allowed as an operator allows a host of theirs.
        TOLLGATE_WEB_ALLOW_NETS="127.0.0.1/32",
        TOLLGATE_ADMIN_OIDC_ISSUER=issuer,
        TOLLGATE_ADMIN_OIDC_CLIENT_ID=ADMIN_CLIENT["client_id"],
        TOLLGATE_ADMIN_OIDC_CLIENT_SECRET=ADMIN_CLIENT["client_secret"],
        TOLLGATE_ADMIN_OIDC_NAME="Operator IdP",
        TOLLGATE_ADMIN_OIDC_SUBJECTS=OPERATOR_SUB,
    )
    callback = [f"{gateway.url}/login/sso/callback/"]
    op = start_provider(
        tmp_path_factory.mktemp("op"),
        users={name: dict(user) for name, user in USERS.items()},
        clients=[
            {**TENANT_CLIENT, "redirect_uris": callback},
            {**ADMIN_CLIENT, "redirect_uris": callback},
        ],
        port=op_port,
    )
    yield SsoStack(gateway=gateway, op=op)
    op.stop()


@pytest.fixture
def sso(transactional_db, sso_stack) -> SsoStack:
    sso_stack.op.config["users"] = {name: dict(user) for name, user in USERS.items()}
    sso_stack.op.set_user("ana")  # writes the pristine claims back
    return sso_stack


def provider_sign_in(client: httpx.Client, start_url: str, username: str) -> str:
    """Follow a sign-in from Tollgate's start to the provider's answer, signing in there as
    `username`; return the callback URL (code and state) the provider sends back."""
    reply = client.get(start_url)
    assert reply.status_code == 302, reply.text
    authorize = reply.headers["location"]
    reply = client.get(authorize)
    assert reply.status_code == 302, reply.text
    login = urljoin(authorize, reply.headers["location"])
    client.get(login)
    reply = client.post(
        login,
        data={
            "username": username,
            "password": PASSWORD,
            "csrfmiddlewaretoken": client.cookies["op_csrftoken"],
            "next": httpx.URL(login).params["next"],
        },
        headers={"Referer": login},
    )
    assert reply.status_code == 302, reply.text
    reply = client.get(urljoin(login, reply.headers["location"]))
    assert reply.status_code == 302, reply.text
    return reply.headers["location"]
