"""The tenant dashboard: thin views over the selectors and services the tenant API uses.

Every page under /dashboard/<account>/ resolves the user's seat first (a 404 for an account
they are not in), looks objects up inside that account only (a 404 for another's), and
changes things through the same service functions as the REST API, after require_change.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse_lazy
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from rest_framework.exceptions import ValidationError

from accounts import members as account_members
from accounts import services as account_services
from accounts.forms import SignInForm
from accounts.logins import password_link_issue
from audit import export as audit_export
from audit.actors import request_actor
from audit.selectors import actions_of_accounts, entries_of_accounts
from billing.models import LedgerEntry
from billing.selectors import budget_alerts, ledger_of_wallet
from core.admin_views import CappedCountPaginator
from core.errors import meanings
from dashboard import selectors
from dashboard.access import Seat, first_account_id, require_change, require_owner, seat_of
from dashboard.charts import charts_page
from dashboard.forms import (
    GroupForm,
    InviteForm,
    KeyForm,
    RoleForm,
)
from dashboard.guardrail_selectors import verdicts_shown
from dashboard.members import members_page
from dashboard.pages import asked_first as _asked_first
from dashboard.pages import page as _page
from dashboard.rotation import RotateForm
from sso.services import SSO_ONLY, password_sign_in_allowed
from usage.api.queries import usage_query
from usage.export import usage_csv_response
from usage.selectors import parse_mark, usage_logs_of_user, usage_page

PAGE_SIZE = 50
CHART_DAYS = (7, 30, 90)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    account_id = first_account_id(user=request.user)
    if account_id is None:
        return render(request, "dashboard/no_account.html")
    return redirect("dashboard:overview", account_id=account_id)


@login_required
def overview(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    return _page(
        request,
        seat,
        "dashboard/overview.html",
        figures=selectors.overview(account=seat.account),
        alerts=budget_alerts(account=seat.account),
    )


@login_required
def charts(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    asked = request.GET.get("days", "")
    days = int(asked) if asked in {str(d) for d in CHART_DAYS} else 30
    page = charts_page(account=seat.account, days=days)
    return _page(
        request,
        seat,
        "dashboard/charts.html",
        page=page,
        payload=page.payload(),
        choices=CHART_DAYS,
    )


@never_cache
@login_required
def keys(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    form = KeyForm(request.POST or None, account=seat.account, creating=True)
    created = secret = None
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            created, secret = account_services.api_key_create(
                group=form.cleaned_data["group"], actor=request_actor(request), **form.key_fields()
            )
            form = KeyForm(account=seat.account, creating=True)
    # The secret is in this one response only (never in the session or a redirect), and the
    # page is not cached.
    return _page(
        request,
        seat,
        "dashboard/keys.html",
        form=form,
        created=created,
        secret=secret,
        keys=selectors.api_keys_of_account(account=seat.account),
        models=selectors.model_names(),
        now=timezone.now(),
    )


@login_required
def key_edit(request: HttpRequest, account_id: int, key_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    api_key = get_object_or_404(selectors.api_keys_of_account(account=seat.account), pk=key_id)
    initial = KeyForm.initial_of(api_key)
    form = KeyForm(
        request.POST or None,
        initial=initial,
        account=seat.account,
        creating=False,
        group=api_key.group,
    )
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            account_services.api_key_update(
                api_key=api_key, actor=request_actor(request), **form.key_fields()
            )
            messages.success(request, f"Key {api_key.prefix}… saved: in force on every replica.")
            return redirect("dashboard:keys", account_id=account_id)
    return _page(
        request,
        seat,
        "dashboard/key_edit.html",
        form=form,
        key=api_key,
        models=selectors.model_names(),
        rotate_form=RotateForm(),
        now=timezone.now(),
    )


@login_required
def key_revoke(request: HttpRequest, account_id: int, key_id: int) -> HttpResponse:
    """GET asks to confirm; POST revokes (refused at once on every replica)."""
    seat = seat_of(user=request.user, account_id=account_id)
    api_key = get_object_or_404(selectors.api_keys_of_account(account=seat.account), pk=key_id)
    require_change(seat)
    if asking := _asked_first(request, seat, "dashboard/key_revoke.html", key=api_key):
        return asking
    account_services.api_key_revoke(api_key=api_key, actor=request_actor(request))
    messages.success(request, f"Key {api_key.prefix}… revoked: its requests are refused now.")
    return redirect("dashboard:keys", account_id=account_id)


# ---------------------------------------------------------------- groups


@login_required
def groups(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    form = GroupForm(request.POST or None)
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            fields = form.group_fields()
            name = fields.pop("name")
            account_services.group_create(
                account=seat.account, name=name, actor=request_actor(request), **fields
            )
            messages.success(request, f"Group {name} created.")
            return redirect("dashboard:groups", account_id=account_id)
    figures = selectors.overview(account=seat.account)
    return _page(request, seat, "dashboard/groups.html", form=form, budgets=figures.groups)


@login_required
def group_edit(request: HttpRequest, account_id: int, group_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    group = get_object_or_404(selectors.groups_of_account(account=seat.account), pk=group_id)
    form = GroupForm(request.POST or None, initial=GroupForm.initial_of(group))
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            account_services.group_update(
                group=group, actor=request_actor(request), **form.group_fields()
            )
            messages.success(request, f"Group {group.name} saved: in force on every replica.")
            return redirect("dashboard:groups", account_id=account_id)
    return _page(request, seat, "dashboard/group_edit.html", form=form, group=group)


# ---------------------------------------------------------------- members


@never_cache
@login_required
def members(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    form = InviteForm(request.POST or None)
    link = None
    if request.method == "POST":
        require_owner(seat)
        if form.is_valid():
            data = form.cleaned_data
            try:
                invited = account_members.membership_invite(
                    account=seat.account,
                    username=data["username"],
                    email=data["email"],
                    role=data["role"],
                    actor=request_actor(request),
                )
            except account_members.MembershipRefused as exc:
                form.add_error("username", str(exc))
            else:
                # Shown in this response only, like a key's secret: hand it to the person.
                link = request.build_absolute_uri(password_link_issue(user=invited.user))
                form = InviteForm()
    return members_page(request, seat, form=form, link=link)


@require_POST
@login_required
def member_role(request: HttpRequest, account_id: int, member_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    member = get_object_or_404(selectors.members_of_account(account=seat.account), pk=member_id)
    require_owner(seat)
    form = RoleForm(request.POST)
    if form.is_valid():
        try:
            account_members.membership_set_role(
                membership=member, role=form.cleaned_data["role"], actor=request_actor(request)
            )
        except account_members.MembershipRefused as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"{member.user} is now {member.role}.")
    return redirect("dashboard:members", account_id=account_id)


@login_required
def member_remove(request: HttpRequest, account_id: int, member_id: int) -> HttpResponse:
    """GET asks to confirm; POST removes the person from this account."""
    seat = seat_of(user=request.user, account_id=account_id)
    member = get_object_or_404(selectors.members_of_account(account=seat.account), pk=member_id)
    require_owner(seat)
    if asking := _asked_first(request, seat, "dashboard/member_remove.html", member=member):
        return asking
    try:
        account_members.membership_remove(membership=member, actor=request_actor(request))
    except account_members.MembershipRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{member.user} removed from {seat.account}.")
    return redirect("dashboard:members", account_id=account_id)


PAGE_MARKS = ("older", "newer")


def _filtered_logs(request: HttpRequest, seat: Seat):
    """Return the account's usage rows under the API's filters (None when they are bad), and
    the filters' errors."""
    params = {k: v for k, v in request.GET.items() if v and k not in PAGE_MARKS}
    assert request.user.is_authenticated  # its views are @login_required
    try:
        query = usage_query(user=request.user, params=params, account=seat.account.pk)
    except ValidationError as exc:
        return None, exc.detail
    return query.logs(), {}


@login_required
def usage(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    logs, errors = _filtered_logs(request, seat)
    page = None
    if logs is not None:
        older, newer = (parse_mark(request.GET.get(name)) for name in PAGE_MARKS)
        page = usage_page(logs, older=older, newer=newer, size=PAGE_SIZE)
    params = request.GET.copy()
    for name in PAGE_MARKS:
        params.pop(name, None)
    groups = list(selectors.groups_of_account(account=seat.account))
    keys = list(selectors.api_keys_of_account(account=seat.account))
    return _page(
        request,
        seat,
        "dashboard/usage.html",
        page=page,
        errors=errors,
        filters=request.GET,
        groups=groups,
        keys=keys,
        group_names={g.pk: g.name for g in groups},
        key_names={k.pk: f"{k.prefix}… {k.name}".strip() for k in keys},
        error_meanings=meanings(),
        query_string=params.urlencode(),
    )


@login_required
def usage_csv(request: HttpRequest, account_id: int) -> HttpResponse | StreamingHttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    logs, errors = _filtered_logs(request, seat)
    if logs is None:
        return HttpResponse(f"Bad filters: {dict(errors)}", status=400)
    return usage_csv_response(logs)


@login_required
def usage_detail(request: HttpRequest, account_id: int, request_id: str) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    assert request.user.is_authenticated  # @login_required
    log = (
        usage_logs_of_user(user=request.user, account=seat.account.pk)
        .filter(request_id=request_id)
        .first()
    )
    if log is None:
        raise Http404("No such request.")
    return _page(
        request,
        seat,
        "dashboard/usage_detail.html",
        log=log,
        error_meaning=meanings().get(log.error_code, ""),
        attempts=log.attempts,
        verdicts=verdicts_shown(log.guardrails),
    )


@login_required
def wallet(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    figures = selectors.overview(account=seat.account)
    entries: QuerySet[LedgerEntry] | list[LedgerEntry] = (
        ledger_of_wallet(wallet=figures.wallet) if figures.wallet else []
    )
    # A busy wallet has millions of entries: the pages count up to a cap, never all of them.
    page = CappedCountPaginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    return _page(request, seat, "dashboard/wallet.html", wallet=figures.wallet, page=page)


# ---------------------------------------------------------------- audit trail


def _audit_entries(request: HttpRequest, account_id: int):
    """The account's trail under the page's action filter, for its owners and admins."""
    seat = seat_of(user=request.user, account_id=account_id)
    require_change(seat)
    action = request.GET.get("action", "")
    return seat, action, entries_of_accounts(account_ids=[seat.account.pk], action=action)


@login_required
def audit(request: HttpRequest, account_id: int) -> HttpResponse:
    seat, action, entries = _audit_entries(request, account_id)
    page = CappedCountPaginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    return _page(
        request,
        seat,
        "dashboard/audit.html",
        page=page,
        action=action,
        actions=actions_of_accounts(account_ids=[seat.account.pk]),
        query_string=urlencode({"action": action}) if action else "",
    )


@login_required
def audit_csv(request: HttpRequest, account_id: int) -> StreamingHttpResponse:
    _, _, entries = _audit_entries(request, account_id)
    return audit_export.csv_response(entries)


@login_required
def audit_jsonl(request: HttpRequest, account_id: int) -> StreamingHttpResponse:
    _, _, entries = _audit_entries(request, account_id)
    return audit_export.jsonl_response(entries)


class LoginView(auth_views.LoginView):
    template_name = "dashboard/login.html"
    redirect_authenticated_user = True
    authentication_form = SignInForm

    def form_valid(self, form):
        # An account that requires single sign-on refuses its members' passwords: the right
        # password gets the message, never a session.
        if not password_sign_in_allowed(user=form.get_user()):
            form.add_error(None, SSO_ONLY)
            return self.form_invalid(form)
        return super().form_valid(form)

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.throttled_s:  # locked out: the form and its message, as a 429 for scripts
            response.status_code = 429
            response["Retry-After"] = str(form.throttled_s)
        return response


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """The one-time link's page: a new password, then the login page."""

    template_name = "dashboard/set_password.html"
    success_url = reverse_lazy("dashboard:login")
    post_reset_login = False

    def form_valid(self, form):
        messages.success(self.request, "Password set. Sign in with it.")
        return super().form_valid(form)
