"""The payer map page: who pays for each model for one virtual key, before any request."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from byok.payer_map import payer_map
from dashboard import selectors
from dashboard.access import seat_of


@login_required
def key_payers(request: HttpRequest, account_id: int, key_id: int) -> HttpResponse:
    """Show the key's payer map (viewers too: it changes nothing); another account's key
    is a 404."""
    seat = seat_of(user=request.user, account_id=account_id)
    keys = selectors.api_keys_of_account(account=seat.account).select_related("group__account")
    api_key = get_object_or_404(keys, pk=key_id)
    payers = payer_map(api_key=api_key)
    return render(
        request,
        "dashboard/key_payers.html",
        {"seat": seat, "account": seat.account, "key": api_key, "payers": payers.models},
    )
