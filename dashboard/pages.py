"""How a dashboard page is answered: in the account's time zone, and asked first when it
destroys something."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from dashboard import selectors
from dashboard.access import Seat


def page(request: HttpRequest, seat: Seat, template: str, **context) -> HttpResponse:
    """Render an account's page; times read in the account's own zone, the one its days and
    budget periods are cut in."""
    with timezone.override(selectors.account_zone(seat.account)):
        return render(request, template, {"seat": seat, "account": seat.account, **context})


def asked_first(request: HttpRequest, seat: Seat, template: str, **context) -> HttpResponse | None:
    """A destructive change asks first: GET answers its confirmation page (returned), the
    confirmation's POST goes on (None)."""
    if request.method == "POST":
        return None
    return page(request, seat, template, **context)
