"""The account's single sign-on settings page: its owners set the provider and rules."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache

from audit.actors import request_actor
from dashboard.access import require_owner, seat_of
from dashboard.pages import page
from sso.forms import ProviderForm
from sso.models import IdentityLink, Provider
from sso.services import SettingsRefused, provider_save
from sso.views import redirect_uri


@never_cache
@login_required
def sso_settings(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    require_owner(seat)
    provider = Provider.objects.filter(account=seat.account).first()
    form = ProviderForm(request.POST or None, initial=ProviderForm.initial_of(provider))
    if request.method == "POST" and form.is_valid():
        if provider is None and not form.cleaned_data["client_secret"]:
            form.add_error("client_secret", "A new provider needs its client secret.")
        else:
            try:
                provider_save(
                    account=seat.account,
                    actor=request_actor(request),
                    client_secret=form.cleaned_data["client_secret"],
                    **form.provider_fields(),
                )
            except SettingsRefused as exc:
                form.add_error("password_sign_in", str(exc))
            else:
                messages.success(request, "Single sign-on settings saved.")
                return redirect("dashboard:sso-settings", account_id=account_id)
    linked = (
        provider is not None
        and IdentityLink.objects.filter(
            issuer=provider.issuer, user_id=int(request.user.pk or 0)
        ).exists()
    )
    return page(
        request,
        seat,
        "dashboard/sso_settings.html",
        form=form,
        provider=provider,
        linked=linked,
        redirect_uri=redirect_uri(request),
    )
