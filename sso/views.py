"""The sign-in routes: start at an account's provider (or the operators'), come back.

  GET /login/sso/?email=...        the login page's lookup: the providers admitting that
                                   domain, each a "Sign in with …" button
  GET /login/sso/<account id>/     start the account's sign-in (?link=1: link the member
                                   signed in now to their identity there)
  GET /login/sso/operator/         start the operators' sign-in to the Django admin
  GET /login/sso/callback/         where every provider sends the browser back

A start keeps its state, nonce and PKCE verifier in the session, under its state; the
callback takes them out (a state works once), trades the code and validates the ID token.
A refusal answers 403 with its reason and leaves no signed-in session.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache

from audit.actors import remote_address
from core.sealing import SealBroken
from sso import operators
from sso.identities import link_current_user, tenant_sign_in
from sso.models import Provider
from sso.oidc import Client, Pending, SignInRefused, authorization_url, exchange
from sso.services import providers_for_email

SESSION_KEY = "sso_pending"
PENDING_MAX = 5  # sign-ins started in one browser and not finished
PENDING_TTL_S = 600
BACKEND = "django.contrib.auth.backends.ModelBackend"


def redirect_uri(request: HttpRequest) -> str:
    """The one callback every provider registers: on TOLLGATE_PUBLIC_URL when set."""
    path = reverse("sso:callback")
    return settings.PUBLIC_URL + path if settings.PUBLIC_URL else request.build_absolute_uri(path)


def _client(provider: Provider, request: HttpRequest) -> Client:
    try:
        secret = provider.client_secret()
    except SealBroken:  # a master key retired too early, or a row copied from elsewhere
        raise SignInRefused(
            "This account's single sign-on secret cannot be read: an owner saves it again.",
            reason="config",
        ) from None
    return Client(
        issuer=provider.issuer,
        client_id=provider.client_id,
        client_secret=secret,
        redirect_uri=redirect_uri(request),
    )


def _begin(request: HttpRequest, client: Client, **intent: Any) -> HttpResponse:
    pending = Pending.fresh()
    try:
        url = authorization_url(client, pending)
    except SignInRefused as exc:
        return refused(request, exc, kind=intent["kind"])
    started = {
        k: v
        for k, v in request.session.get(SESSION_KEY, {}).items()
        if v["at"] > time.time() - PENDING_TTL_S
    }
    while len(started) >= PENDING_MAX:
        started.pop(min(started, key=lambda s: started[s]["at"]))
    nxt = request.GET.get("next", "")
    safe = url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()})
    started[pending.state] = {
        "nonce": pending.nonce,
        "verifier": pending.code_verifier,
        "at": time.time(),
        "next": nxt if safe else "",
        **intent,
    }
    request.session[SESSION_KEY] = started
    return redirect(url)


def refused(request: HttpRequest, exc: SignInRefused, *, kind: str) -> HttpResponse:
    """Answer a refused sign-in: its reason, 403, and no signed-in session (a member who
    was linking stays signed in as themselves)."""
    if kind != "link":
        request.session.flush()
    back = reverse("admin:login") if kind == "operator" else reverse("dashboard:login")
    context = {"message": str(exc), "reason": exc.reason, "back": back}
    return render(request, "sso/refused.html", context, status=403)


@never_cache
def choose(request: HttpRequest) -> HttpResponse:
    """The login page's "Sign in with single sign-on": the providers of the email's domain."""
    email = request.GET.get("email", "").strip()
    providers = providers_for_email(email) if "@" in email else []
    return render(
        request,
        "sso/choose.html",
        {"email": email, "providers": providers, "next": request.GET.get("next", "")},
    )


@never_cache
def start(request: HttpRequest, account_id: int) -> HttpResponse:
    provider = Provider.objects.filter(account_id=account_id, enabled=True).first()
    if provider is None:
        raise Http404("No single sign-on for this account.")
    linking = request.GET.get("link") == "1" and request.user.is_authenticated
    kind = "link" if linking else "tenant"
    try:
        client = _client(provider, request)
    except SignInRefused as exc:
        return refused(request, exc, kind=kind)
    return _begin(request, client, kind=kind, account_id=account_id)


@never_cache
def operator_start(request: HttpRequest) -> HttpResponse:
    client = operators.operator_client(redirect_uri=redirect_uri(request))
    if client is None:
        raise Http404("The admin has no single sign-on.")
    return _begin(request, client, kind="operator")


@never_cache
def callback(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    started = request.session.get(SESSION_KEY, {})
    intent = started.pop(state, None) if state else None
    request.session[SESSION_KEY] = started  # the state works once, whatever follows
    kind = intent["kind"] if intent else "tenant"
    address = remote_address(request.META)
    try:
        if intent is None or intent["at"] < time.time() - PENDING_TTL_S:
            raise SignInRefused(
                "This sign-in was used already or has expired. Start again.", reason="state"
            )
        if request.GET.get("error"):
            raise SignInRefused(
                f"Your provider did not sign you in ({request.GET['error'][:100]}).",
                reason="provider",
            )
        pending = Pending(state=state, nonce=intent["nonce"], code_verifier=intent["verifier"])
        code = request.GET.get("code", "")
        if kind == "operator":
            client = operators.operator_client(redirect_uri=redirect_uri(request))
            if client is None:
                raise SignInRefused("The admin has no single sign-on.", reason="config")
            claims = exchange(client, code=code, pending=pending)
            user = operators.operator_sign_in(claims=claims, address=address)
            landing = intent["next"] or reverse("admin:index")
        else:
            provider = (
                Provider.objects.select_related("account")
                .filter(account_id=intent["account_id"], enabled=True)
                .first()
            )
            if provider is None:
                raise SignInRefused("This account's single sign-on is off.", reason="config")
            claims = exchange(_client(provider, request), code=code, pending=pending)
            if kind == "link":
                if not request.user.is_authenticated:
                    raise SignInRefused("Sign in first, then link.", reason="state")
                link_current_user(
                    provider=provider, claims=claims, user=request.user, address=address
                )
                return redirect("dashboard:sso-settings", account_id=provider.account_id)
            user = tenant_sign_in(provider=provider, claims=claims, address=address)
            landing = intent["next"] or reverse(
                "dashboard:overview", kwargs={"account_id": provider.account_id}
            )
    except SignInRefused as exc:
        return refused(request, exc, kind=kind)
    login(request, user, backend=BACKEND)  # a new session key: nothing of before carries over
    return redirect(landing)
