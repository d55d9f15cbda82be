"""The members page's SCIM section: an owner creates or rotates the account's SCIM token,
shown once with the URL a directory calls (scim/tokens.py)."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.models import Membership
from audit.actors import request_actor
from dashboard import selectors
from dashboard.access import require_owner, seat_of
from dashboard.forms import DirectoryRolesForm, InviteForm
from dashboard.pages import page
from scim.models import ScimToken
from scim.tokens import scim_token_issue

GRACES = [
    (0, "None: the old token stops now"),
    (3600, "1 hour"),
    (86400, "1 day"),
    (604800, "7 days"),
]


class ScimTokenForm(forms.Form):
    grace_s = forms.TypedChoiceField(
        label="The old token keeps working for",
        choices=GRACES,
        coerce=int,
        initial=3600,
    )


def scim_context(account, **extra) -> dict:
    """What the members page's SCIM section shows."""
    token = ScimToken.objects.filter(account=account).first()
    until = token.previous_valid_until if token else None
    return {
        "scim_token": token,
        "scim_previous_until": until if until and until > timezone.now() else None,
        "scim_form": ScimTokenForm(),
        **extra,
    }


@never_cache
@require_POST
@login_required
def scim_token(request: HttpRequest, account_id: int) -> HttpResponse:
    """Create the SCIM token, or rotate it; the members page answers with it shown once."""
    seat = seat_of(user=request.user, account_id=account_id)
    require_owner(seat)
    form = ScimTokenForm(request.POST)
    grace_s = form.cleaned_data["grace_s"] if form.is_valid() else 0
    token, secret = scim_token_issue(
        account=seat.account, grace_s=grace_s, actor=request_actor(request)
    )
    return page(
        request,
        seat,
        "dashboard/members.html",
        form=InviteForm(),
        link=None,
        members=selectors.members_of_account(account=seat.account),
        roles=Membership.Role.choices,
        **scim_context(
            seat.account,
            scim_secret=secret,
            scim_url=request.build_absolute_uri("/scim/v2"),
        ),
        directory_form=DirectoryRolesForm.of(seat.account),
    )
