"""The dashboard's tag budgets: the Tag budgets page lists each with its tag's spend this
period and creates them; each has its edit page and a removal asked first. Every write goes
through billing.tag_budgets, so it is audited and live on every replica when it answers; the
hold itself is the ledger's (billing/tag_ledger.py).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect

from accounts.models import Account, Period
from audit.actors import request_actor
from billing import tag_budgets as services
from billing.models import TagBudget
from core.admin_views import DollarField
from core.tags import RULE, TagError, clean_tag
from dashboard.access import require_change, seat_of
from dashboard.pages import asked_first, page


class TagBudgetEditForm(forms.Form):
    budget = DollarField(help_text="In dollars, e.g. 25.00; 0.00 refuses every request tagged.")
    budget_period = forms.ChoiceField(choices=Period.choices, initial=Period.MONTHLY)

    def fields_of(self) -> dict:
        return {
            "budget_max_micro": self.cleaned_data["budget"],
            "budget_period": self.cleaned_data["budget_period"],
        }


class TagBudgetForm(TagBudgetEditForm):
    tag = forms.CharField(max_length=200, help_text=f"Sent as X-Tollgate-Tags; {RULE}.")
    field_order = ["tag", "budget", "budget_period"]

    def __init__(self, *args, account: Account, **kwargs):
        super().__init__(*args, **kwargs)
        self.account = account

    def clean_tag(self) -> str:
        try:
            tag = clean_tag(self.cleaned_data["tag"])
        except TagError as exc:
            raise forms.ValidationError(str(exc)) from None
        if TagBudget.objects.filter(account=self.account, tag=tag).exists():
            raise forms.ValidationError(f"Tag {tag!r} has a budget already.")
        return tag


def _rows(account: Account):
    return TagBudget.objects.filter(account=account).select_related("account").order_by("tag")


@login_required
def tag_budgets(request: HttpRequest, account_id: int) -> HttpResponse:
    """List the account's tag budgets with this period's spend; create one."""
    seat = seat_of(user=request.user, account_id=account_id)
    form = TagBudgetForm(request.POST or None, account=seat.account)
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            try:
                row = services.tag_budget_create(
                    account=seat.account,
                    tag=form.cleaned_data["tag"],
                    actor=request_actor(request),
                    **form.fields_of(),
                )
            except services.TagBudgetError as exc:
                form.add_error("tag", str(exc))
            else:
                messages.success(request, f"Tag {row.tag} has a budget: in force on every replica.")
                return redirect("dashboard:tag-budgets", account_id=account_id)
    views = services.with_spend(list(_rows(seat.account)))
    rows = [
        (v, max(v.budget.budget_max_micro - v.spent_micro - v.reserved_micro, 0)) for v in views
    ]
    return page(request, seat, "dashboard/tag_budgets.html", form=form, rows=rows)


@login_required
def tag_budget_edit(request: HttpRequest, account_id: int, tag_budget_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    row = get_object_or_404(_rows(seat.account), pk=tag_budget_id)
    initial = {"budget": row.budget_max_micro, "budget_period": row.budget_period}
    form = TagBudgetEditForm(request.POST or None, initial=initial)
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            services.tag_budget_update(budget=row, actor=request_actor(request), **form.fields_of())
            messages.success(request, f"Tag {row.tag}'s budget saved: in force on every replica.")
            return redirect("dashboard:tag-budgets", account_id=account_id)
    return page(request, seat, "dashboard/tag_budget_edit.html", form=form, row=row)


@login_required
def tag_budget_delete(request: HttpRequest, account_id: int, tag_budget_id: int) -> HttpResponse:
    """GET asks to confirm; POST removes the budget (its spend rows stay)."""
    seat = seat_of(user=request.user, account_id=account_id)
    row = get_object_or_404(_rows(seat.account), pk=tag_budget_id)
    require_change(seat)
    if asking := asked_first(request, seat, "dashboard/tag_budget_delete.html", row=row):
        return asking
    services.tag_budget_delete(budget=row, actor=request_actor(request))
    messages.success(request, f"Tag {row.tag}'s budget removed: in force on every replica.")
    return redirect("dashboard:tag-budgets", account_id=account_id)
