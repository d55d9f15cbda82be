"""Rotate a key's secret from its edit page: the new secret shown once, the old one kept for
the grace period picked (accounts/rotation.py holds the rule)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import rotation
from audit.actors import request_actor
from dashboard import selectors
from dashboard.access import require_change, seat_of
from dashboard.pages import page

HOUR_S = 3600
DAY_S = 24 * HOUR_S
GRACE_CHOICES = [
    (0, "None: the old secret stops working now"),
    (HOUR_S, "1 hour"),
    (DAY_S, "1 day"),
    (rotation.GRACE_MAX_S, "7 days"),
]


class RotateForm(forms.Form):
    grace_s = forms.TypedChoiceField(
        label="The old secret keeps working for",
        choices=GRACE_CHOICES,
        coerce=int,
        initial=HOUR_S,
    )


@never_cache
@require_POST
@login_required
def key_rotate(request: HttpRequest, account_id: int, key_id: int) -> HttpResponse:
    """Rotate and answer the new secret in this one response (never a redirect or the
    session), like a key's creation."""
    seat = seat_of(user=request.user, account_id=account_id)
    api_key = get_object_or_404(selectors.api_keys_of_account(account=seat.account), pk=key_id)
    require_change(seat)
    form = RotateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Pick how long the old secret keeps working.")
        return redirect("dashboard:key-edit", account_id=account_id, key_id=key_id)
    try:
        done = rotation.api_key_rotate(
            api_key=api_key, grace_s=form.cleaned_data["grace_s"], actor=request_actor(request)
        )
    except rotation.NotRotatable as refused:
        messages.error(request, str(refused))
        return redirect("dashboard:key-edit", account_id=account_id, key_id=key_id)
    return page(
        request,
        seat,
        "dashboard/key_rotated.html",
        key=api_key,
        secret=done.secret,
        previous_valid_until=done.previous_valid_until,
    )
