"""The dashboard's Cache page: the response cache's hit rate and money saved over the last
days, in all and per key, group and model (read from the usage rollups, as the API's
/api/usage/cache), and the purge of the account's cached answers, asked first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts import services as account_services
from accounts.models import Account
from audit.actors import request_actor
from dashboard import selectors
from dashboard.access import require_change, seat_of
from dashboard.pages import asked_first, page
from usage.selectors import cache_report

CACHE_DAYS = (7, 30, 90)


@dataclass(frozen=True)
class CacheRow:
    """One key's, group's or model's line of the page."""

    label: str
    figures: dict


@dataclass(frozen=True)
class CachePage:
    days: int
    totals: dict
    by_key: list[CacheRow]
    by_group: list[CacheRow]
    by_model: list[CacheRow]

    @property
    def active(self) -> bool:
        """Whether any request in the window reached the cache (hit, miss or bypass)."""
        t = self.totals
        return bool(t["hits"] or t["misses"] or t["bypasses"])


def cache_page(*, account: Account, days: int, now: datetime | None = None) -> CachePage:
    """Return the account's cache figures over the last `days` UTC days (today included),
    each key, group and model by name."""
    report = cache_report(accounts=[account.pk], start=selectors.chart_window(days=days, now=now))
    keys = {
        k.pk: f"{k.prefix}… {k.name}".strip()
        for k in selectors.api_keys_of_account(account=account)
    }
    groups = {g.pk: g.name for g in selectors.groups_of_account(account=account)}

    def rows(found: list[dict], name: str, labels: dict | None) -> list[CacheRow]:
        out = []
        for row in found:
            figures = dict(row)
            value = figures.pop(name)
            if value is None:
                label = "(none)"
            elif labels is None:
                label = value
            else:
                label = labels.get(value, f"#{value}")
            out.append(CacheRow(label=label, figures=figures))
        return out

    return CachePage(
        days=days,
        totals=report.totals,
        by_key=rows(report.by_key, "key", keys),
        by_group=rows(report.by_group, "group", groups),
        by_model=rows(report.by_model, "model", None),
    )


@login_required
def cache(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    asked = request.GET.get("days", "")
    days = int(asked) if asked in {str(d) for d in CACHE_DAYS} else 30
    return page(
        request,
        seat,
        "dashboard/cache.html",
        page=cache_page(account=seat.account, days=days),
        choices=CACHE_DAYS,
    )


@login_required
def cache_purge(request: HttpRequest, account_id: int) -> HttpResponse:
    """GET asks to confirm; POST drops every cached answer of the account on every replica."""
    seat = seat_of(user=request.user, account_id=account_id)
    require_change(seat)
    if asking := asked_first(request, seat, "dashboard/cache_purge.html"):
        return asking
    purged = account_services.response_cache_purge(
        account=seat.account, actor=request_actor(request)
    )
    # The count is the cache Redis's; an embedded run's in-process store is emptied uncounted.
    counted = f": {purged:,} cached answer{'' if purged == 1 else 's'} dropped" if purged else ""
    messages.success(request, f"Cache purged on every gateway replica{counted}.")
    return redirect("dashboard:cache", account_id=account_id)
