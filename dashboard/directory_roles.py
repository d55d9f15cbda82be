"""The members page's directory roles: an owner maps the company directory's groups (an SSO
groups claim, SCIM Groups) to roles (accounts/directory.py)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.directory import directory_roles_set
from audit.actors import request_actor
from dashboard.access import require_owner, seat_of
from dashboard.forms import DirectoryRolesForm
from dashboard.members import members_page


@require_POST
@login_required
def directory_roles(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    require_owner(seat)
    form = DirectoryRolesForm(request.POST)
    if form.is_valid():
        try:
            directory_roles_set(
                account=seat.account,
                roles=form.cleaned_data["roles"],
                actor=request_actor(request),
            )
        except ValidationError as exc:
            form.add_error("roles", exc)
        else:
            messages.success(request, "Directory roles saved.")
            return redirect("dashboard:members", account_id=account_id)
    return members_page(request, seat, directory_form=form)
