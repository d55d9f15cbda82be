"""The dashboard's team keys: pools, their keys and fallback flags, through the same services
as the BYOK API.

The provider list offers only the profiles a team key may be added for, each with what it
serves; a key saved where none of the account's recent models is served says so; removing a
pool's last key asks first and says what the next request will do (byok.last_key).
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from audit.actors import request_actor
from byok import services as byok_services
from byok.last_key import after_last_key, is_last_key
from byok.models import TeamKey
from byok.selectors import RECENT_DAYS, team_key_profiles, unserved_recent_models
from dashboard import selectors
from dashboard.access import require_change, seat_of
from dashboard.forms import FallbackForm, TeamKeyAddForm
from dashboard.pages import asked_first, page
from usage.selectors import models_of_account


@login_required
def team_keys(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    profiles = team_key_profiles()
    form = TeamKeyAddForm(request.POST or None, account=seat.account, profiles=profiles)
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            data = form.cleaned_data
            try:
                team_key = byok_services.team_key_add(
                    group=data["group"],
                    provider=data["provider"],
                    label=data["label"],
                    key=data["key"],
                    actor=request_actor(request),
                )
            except byok_services.TeamKeyRefused as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Team key {team_key.label} (…{team_key.last4}) added.")
                since = timezone.now() - timedelta(days=RECENT_DAYS)
                recent = models_of_account(account_id=seat.account.pk, since=since)
                [profile] = [p for p in profiles if p.name == data["provider"]]
                if warning := unserved_recent_models(profile, recent):
                    messages.warning(request, warning)
                return redirect("dashboard:team-keys", account_id=account_id)
    return page(
        request,
        seat,
        "dashboard/team_keys.html",
        form=form,
        profiles=profiles,
        pools=selectors.pool_states(account=seat.account),
        now=timezone.now(),
    )


@login_required
def pool_remove(request: HttpRequest, account_id: int, pool_id: int) -> HttpResponse:
    """GET asks to confirm; POST removes the pool and its keys (the platform serves again)."""
    seat = seat_of(user=request.user, account_id=account_id)
    pool = get_object_or_404(selectors.pools_of_account(account=seat.account), pk=pool_id)
    require_change(seat)
    if asking := asked_first(request, seat, "dashboard/pool_remove.html", pool=pool):
        return asking
    byok_services.pool_delete(pool=pool, actor=request_actor(request))
    messages.success(
        request,
        f"Pool {pool.group.name} · {pool.provider} removed: its requests go to the platform's"
        " keys, billed to the wallet.",
    )
    return redirect("dashboard:team-keys", account_id=account_id)


@login_required
def team_key_remove(request: HttpRequest, account_id: int, key_id: int) -> HttpResponse:
    """GET asks to confirm; POST removes the key. A pool's last key is removed only by the
    confirmation's POST (`confirm`): a stale page's one-click Remove asks first too."""
    seat = seat_of(user=request.user, account_id=account_id)
    team_key = get_object_or_404(
        TeamKey.objects.filter(pool__group__account=seat.account).select_related("pool__group"),
        pk=key_id,
    )
    require_change(seat)
    if request.method == "POST":
        try:
            byok_services.team_key_delete(
                team_key=team_key,
                actor=request_actor(request),
                keep_last="confirm" not in request.POST,
            )
        except byok_services.LastTeamKey:
            pass  # asked first, below
        else:
            said = f"Team key {team_key.label} (…{team_key.last4}) removed."
            if is_last_key(team_key):  # none left beside it: the pool is empty now
                next_request = after_last_key(team_key.pool).sentence
                said += f" The {team_key.pool.provider} pool has no key left. {next_request}"
            messages.success(request, said)
            return redirect("dashboard:team-keys", account_id=account_id)
    after = after_last_key(team_key.pool) if is_last_key(team_key) else None
    return page(request, seat, "dashboard/team_key_remove.html", team_key=team_key, after=after)


@require_POST
@login_required
def pool_fallback(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    form = FallbackForm(request.POST, account=seat.account)
    if not form.is_valid():
        raise Http404("No such pool.")
    require_change(seat)
    data = form.cleaned_data
    try:
        byok_services.pool_set_fallback(
            group=data["group"],
            provider=data["provider"],
            fallback=data["fallback"],
            actor=request_actor(request),
        )
    except byok_services.TeamKeyRefused as exc:
        messages.error(request, str(exc))
    else:
        if data["fallback"]:
            said = (
                f"Platform fallback for {data['provider']} is on: when every team key fails,"
                " requests are served on the platform's keys and paid from your wallet."
            )
        else:
            said = (
                f"Platform fallback for {data['provider']} is off: when every team key fails,"
                " requests are refused (LM-3021) and platform money is never spent."
            )
        messages.success(request, said)
    return redirect("dashboard:team-keys", account_id=account_id)
