"""The dashboard's model access groups: the Access page lists and creates them, each has its
edit page and a delete asked first, and the key and group edit pages assign them (a small form
of their own posting here). The rule they follow is accounts/model_access.py; every write goes
through accounts.access_groups, so it is audited and live on every replica when it answers.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from accounts import access_groups as services
from accounts.model_access import ACCESS_GROUPS_MAX, BadEntry, clean_entries, name_problem
from accounts.models import AccessGroup, Account
from audit.actors import request_actor
from dashboard import selectors
from dashboard.access import require_change, seat_of
from dashboard.forms import field_of
from dashboard.pages import asked_first, page

ENTRIES_HELP = (
    "One per line or separated by commas: a model name or alias (gpt-4o-mini), a pattern "
    "over model names (gpt-*), or either under a profile or provider (anthropic/*)."
)


def entries_of(text: str) -> list[str]:
    """Split a textarea's entries on lines and commas, blanks dropped."""
    return [e.strip() for line in text.splitlines() for e in line.split(",") if e.strip()]


class AccessGroupForm(forms.Form):
    name = forms.CharField(max_length=64)
    description = forms.CharField(max_length=200, required=False)
    entries = forms.CharField(
        label="Models and patterns",
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text=ENTRIES_HELP,
    )

    def __init__(self, *args, account: Account, row: AccessGroup | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.account, self.row = account, row

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        problem = name_problem(name)
        if problem:
            raise forms.ValidationError(problem[0].upper() + problem[1:] + ".")
        taken = AccessGroup.objects.filter(account=self.account, name=name)
        if self.row is not None:
            taken = taken.exclude(pk=self.row.pk)
        if taken.exists():
            raise forms.ValidationError(f"An access group {name!r} exists already.")
        return name

    def clean_entries(self) -> list[str]:
        try:
            entries = clean_entries(entries_of(self.cleaned_data["entries"]))
        except BadEntry as exc:
            raise forms.ValidationError(str(exc)) from None
        if not entries:
            raise forms.ValidationError("Name at least one model or pattern.")
        return entries

    @staticmethod
    def initial_of(row: AccessGroup) -> dict:
        return {"name": row.name, "description": row.description, "entries": "\n".join(row.entries)}


class AssignForm(forms.Form):
    access_groups = forms.ModelMultipleChoiceField(
        queryset=AccessGroup.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args, account: Account, **kwargs):
        super().__init__(*args, **kwargs)
        # Only the account's own: another account's id is "not one of the available choices".
        access_groups = field_of(self, "access_groups", forms.ModelMultipleChoiceField)
        access_groups.queryset = services.access_groups_of_account(account=account)

    def clean_access_groups(self) -> list[AccessGroup]:
        chosen = list(self.cleaned_data["access_groups"])
        if len(chosen) > ACCESS_GROUPS_MAX:
            raise forms.ValidationError(f"At most {ACCESS_GROUPS_MAX} access groups.")
        return chosen


def _row(account: Account, access_group_id: int) -> AccessGroup:
    """The account's access group of that id; 404 for any other (it confirms nothing)."""
    return get_object_or_404(services.access_groups_of_account(account=account), pk=access_group_id)


@login_required
def access_groups(request: HttpRequest, account_id: int) -> HttpResponse:
    """List the account's access groups with what they reach; create one."""
    seat = seat_of(user=request.user, account_id=account_id)
    form = AccessGroupForm(request.POST or None, account=seat.account)
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            row = services.access_group_create(
                account=seat.account, actor=request_actor(request), **form.cleaned_data
            )
            messages.success(request, f"Access group {row.name} created.")
            return redirect("dashboard:access-groups", account_id=account_id)
    rows = services.access_groups_of_account(account=seat.account).prefetch_related(
        "keys", "groups"
    )
    return page(
        request,
        seat,
        "dashboard/access_groups.html",
        form=form,
        rows=rows,
        models=selectors.model_names(),
    )


@login_required
def access_group_edit(request: HttpRequest, account_id: int, access_group_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    row = get_object_or_404(
        services.access_groups_of_account(account=seat.account), pk=access_group_id
    )
    form = AccessGroupForm(
        request.POST or None, initial=AccessGroupForm.initial_of(row), account=seat.account, row=row
    )
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            services.access_group_update(
                access_group=row, actor=request_actor(request), **form.cleaned_data
            )
            messages.success(request, f"Access group {row.name} saved: in force on every replica.")
            return redirect("dashboard:access-groups", account_id=account_id)
    return page(
        request,
        seat,
        "dashboard/access_group_edit.html",
        form=form,
        row=row,
        models=selectors.model_names(),
    )


@login_required
def access_group_delete(
    request: HttpRequest, account_id: int, access_group_id: int
) -> HttpResponse:
    """GET asks to confirm; POST deletes it with its assignments."""
    seat = seat_of(user=request.user, account_id=account_id)
    row = get_object_or_404(
        services.access_groups_of_account(account=seat.account), pk=access_group_id
    )
    require_change(seat)
    if asking := asked_first(request, seat, "dashboard/access_group_delete.html", row=row):
        return asking
    services.access_group_delete(access_group=row, actor=request_actor(request))
    messages.success(request, f"Access group {row.name} deleted: in force on every replica.")
    return redirect("dashboard:access-groups", account_id=account_id)


@login_required
@require_POST
def key_access(request: HttpRequest, account_id: int, key_id: int) -> HttpResponse:
    """Assign a key's access groups (from its edit page)."""
    seat = seat_of(user=request.user, account_id=account_id)
    api_key = get_object_or_404(selectors.api_keys_of_account(account=seat.account), pk=key_id)
    require_change(seat)
    form = AssignForm(request.POST, account=seat.account)
    if form.is_valid():
        services.key_access_groups_set(
            api_key=api_key,
            access_groups=form.cleaned_data["access_groups"],
            actor=request_actor(request),
        )
        messages.success(request, f"Key {api_key.prefix}… access groups saved: in force now.")
    else:
        messages.error(
            request, " ".join(map(str, form.errors.get("access_groups", ["Not saved."])))
        )
    return redirect("dashboard:key-edit", account_id=account_id, key_id=key_id)


@login_required
@require_POST
def group_access(request: HttpRequest, account_id: int, group_id: int) -> HttpResponse:
    """Assign the access groups that bound a group's keys (from its edit page)."""
    seat = seat_of(user=request.user, account_id=account_id)
    group = get_object_or_404(selectors.groups_of_account(account=seat.account), pk=group_id)
    require_change(seat)
    form = AssignForm(request.POST, account=seat.account)
    if form.is_valid():
        services.group_access_groups_set(
            group=group,
            access_groups=form.cleaned_data["access_groups"],
            actor=request_actor(request),
        )
        messages.success(request, f"Group {group.name} access groups saved: in force now.")
    else:
        messages.error(
            request, " ".join(map(str, form.errors.get("access_groups", ["Not saved."])))
        )
    return redirect("dashboard:group-edit", account_id=account_id, group_id=group_id)
