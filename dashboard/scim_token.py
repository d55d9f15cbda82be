"""The members page's SCIM section: an owner creates or rotates the account's SCIM token,
shown once with the URL a directory calls (scim/tokens.py)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from audit.actors import request_actor
from dashboard.access import require_owner, seat_of
from dashboard.members import ScimTokenForm, members_page
from scim.tokens import scim_token_issue


@never_cache
@require_POST
@login_required
def scim_token(request: HttpRequest, account_id: int) -> HttpResponse:
    """Create the SCIM token, or rotate it; the members page answers with it shown once."""
    seat = seat_of(user=request.user, account_id=account_id)
    require_owner(seat)
    form = ScimTokenForm(request.POST)
    grace_s = form.cleaned_data["grace_s"] if form.is_valid() else 0
    _, secret = scim_token_issue(
        account=seat.account, grace_s=grace_s, actor=request_actor(request)
    )
    return members_page(request, seat, scim_secret=secret)
