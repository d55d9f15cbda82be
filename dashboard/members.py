"""The members page, as every view that answers it renders it: the members, the invite form,
the SCIM token section and the directory roles (each view overrides what it just changed)."""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts.models import Membership
from dashboard import selectors
from dashboard.access import Seat
from dashboard.forms import DirectoryRolesForm, InviteForm
from dashboard.pages import page
from dashboard.rotation import GRACE_CHOICES, HOUR_S
from scim.models import ScimToken


class ScimTokenForm(forms.Form):
    grace_s = forms.TypedChoiceField(
        label="The old token keeps working for", choices=GRACE_CHOICES, coerce=int, initial=HOUR_S
    )


def members_page(request: HttpRequest, seat: Seat, **shown: object) -> HttpResponse:
    """Render the account's members page; `shown` replaces parts of its context (a bound
    form with its errors, a secret shown this once)."""
    token = ScimToken.objects.filter(account=seat.account).first()
    until = token.previous_valid_until if token else None
    context = {
        "form": InviteForm(),
        "link": None,
        "members": selectors.members_of_account(account=seat.account),
        "roles": Membership.Role.choices,
        "scim_token": token,
        "scim_previous_until": until if until and until > timezone.now() else None,
        "scim_form": ScimTokenForm(),
        "directory_form": DirectoryRolesForm.of(seat.account),
    }
    return page(request, seat, "dashboard/members.html", **{**context, **shown})
