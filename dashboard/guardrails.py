"""The dashboard's Guardrails page: the guardrails the account sees (its own, and the
operator's read-only), where each applies and by whose decision, and how often each checked
and found something in the last 24 hours; the account's own custom and webhook guardrails
made, changed and deleted (a webhook's secret shown once), and attached or detached at the
account, a group or a key.

Every write goes through guardrails.services as the tenant, so it is audited and refused
exactly as the tenant API's is: what the operator attached is neither detached nor changed
here. Viewers see the page; owners and admins change it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from audit.actors import request_actor
from dashboard.access import Seat, require_change, seat_of
from dashboard.guardrail_forms import AttachForm, GuardrailForm
from dashboard.guardrail_selectors import (
    VERDICT_ROWS_MAX,
    VerdictCount,
    attachments_of_account,
    guardrails_of_account,
    recent_verdicts,
)
from dashboard.pages import asked_first, page
from guardrails import services
from guardrails.models import Guardrail, GuardrailAttachment
from guardrails.rules import GuardrailInvalid

IN_FORCE = "in force on every gateway replica"


@dataclass(frozen=True)
class GuardrailRow:
    guardrail: Guardrail
    attachments: list[GuardrailAttachment]
    recent: VerdictCount

    @property
    def operator_attached(self) -> bool:
        return any(a.attached_by == services.OPERATOR for a in self.attachments)

    @property
    def locked(self) -> bool:
        """The account may not change or delete it: the operator's, or attached by them."""
        return self.guardrail.is_operators or self.operator_attached


def _own(seat: Seat):
    return Guardrail.objects.filter(account=seat.account)


def _operator_attached(guardrail: Guardrail) -> bool:
    return guardrail.attachments.filter(attached_by=services.OPERATOR).exists()


def _render(request: HttpRequest, seat: Seat, **context) -> HttpResponse:
    account = seat.account
    visible = guardrails_of_account(account=account)
    attached: dict[int, list[GuardrailAttachment]] = {}
    for attachment in attachments_of_account(account=account):
        attached.setdefault(attachment.guardrail_id, []).append(attachment)
    recent = recent_verdicts(account=account)
    rows = [
        GuardrailRow(
            guardrail=row,
            attachments=attached.get(row.pk, []),
            recent=recent.by_name.get(row.name, VerdictCount()),
        )
        for row in visible
    ]
    return page(
        request,
        seat,
        "dashboard/guardrails.html",
        rows=rows,
        recent=recent,
        rows_max=VERDICT_ROWS_MAX,
        form=context.pop("form", None) or GuardrailForm(),
        attach_form=context.pop("attach_form", None)
        or AttachForm(account=account, guardrails=visible),
        **context,
    )


@never_cache
@login_required
def guardrails(request: HttpRequest, account_id: int) -> HttpResponse:
    """List the guardrails; make one (a webhook's secret in this one answer) or attach one."""
    seat = seat_of(user=request.user, account_id=account_id)
    if request.method != "POST":
        return _render(request, seat)
    require_change(seat)
    if request.POST.get("form") == "attach":
        return _attach(request, seat)
    form = GuardrailForm(request.POST)
    if form.is_valid():
        try:
            row, secret = services.guardrail_create(
                account=seat.account, actor=request_actor(request), **form.fields_of()
            )
        except GuardrailInvalid as exc:
            form.refused(exc)
        else:
            if secret is not None:
                return _render(request, seat, created=row, secret=secret)
            messages.success(request, f"Guardrail {row.name} created. Attach it to apply it.")
            return redirect("dashboard:guardrails", account_id=account_id)
    return _render(request, seat, form=form)


def _attach(request: HttpRequest, seat: Seat) -> HttpResponse:
    visible = guardrails_of_account(account=seat.account)
    form = AttachForm(request.POST, account=seat.account, guardrails=visible)
    if form.is_valid():
        try:
            attachment = services.attachment_create(
                guardrail=form.cleaned_data["guardrail"],
                account=seat.account,
                actor=request_actor(request),
                **form.place(),
            )
        except GuardrailInvalid as exc:
            form.refused(exc)
        else:
            messages.success(
                request, f"Guardrail {attachment.guardrail.name} attached: {IN_FORCE}."
            )
            return redirect("dashboard:guardrails", account_id=seat.account.pk)
    return _render(request, seat, attach_form=form)


@never_cache
@login_required
def guardrail_edit(request: HttpRequest, account_id: int, guardrail_id: int) -> HttpResponse:
    """Change an own guardrail (not its kind); read-only once the operator attached it."""
    seat = seat_of(user=request.user, account_id=account_id)
    row = get_object_or_404(_own(seat), pk=guardrail_id)
    locked = _operator_attached(row)
    form = GuardrailForm(
        request.POST if request.method == "POST" else None,
        kind=row.kind,
        initial=GuardrailForm.initial_of(row),
    )
    if request.method == "POST":
        require_change(seat)
        if form.is_valid():
            try:
                services.guardrail_update(
                    guardrail=row, actor=request_actor(request), **form.fields_of()
                )
            except GuardrailInvalid as exc:
                form.refused(exc)
                row.refresh_from_db()  # the update set the refused values on it
            except services.GuardrailRefused as exc:
                raise PermissionDenied(str(exc)) from None
            else:
                messages.success(request, f"Guardrail {row.name} saved: {IN_FORCE}.")
                return redirect("dashboard:guardrails", account_id=account_id)
    return page(request, seat, "dashboard/guardrail_edit.html", form=form, row=row, locked=locked)


@never_cache
@login_required
@require_POST
def guardrail_rotate(request: HttpRequest, account_id: int, guardrail_id: int) -> HttpResponse:
    """Give an own webhook guardrail a new secret, shown in this one answer."""
    seat = seat_of(user=request.user, account_id=account_id)
    row = get_object_or_404(_own(seat).filter(kind=Guardrail.Kind.WEBHOOK), pk=guardrail_id)
    require_change(seat)
    secret = services.guardrail_rotate_secret(guardrail=row, actor=request_actor(request))
    form = GuardrailForm(kind=row.kind, initial=GuardrailForm.initial_of(row))
    return page(
        request,
        seat,
        "dashboard/guardrail_edit.html",
        form=form,
        row=row,
        locked=_operator_attached(row),
        secret=secret,
    )


@login_required
def guardrail_delete(request: HttpRequest, account_id: int, guardrail_id: int) -> HttpResponse:
    """GET asks to confirm; POST deletes the guardrail with its attachments."""
    seat = seat_of(user=request.user, account_id=account_id)
    row = get_object_or_404(_own(seat), pk=guardrail_id)
    require_change(seat)
    if _operator_attached(row):
        raise PermissionDenied(
            "The operator attached this guardrail: only the operator can delete it."
        )
    if asking := asked_first(request, seat, "dashboard/guardrail_delete.html", row=row):
        return asking
    try:
        services.guardrail_delete(guardrail=row, actor=request_actor(request))
    except services.GuardrailRefused as exc:
        raise PermissionDenied(str(exc)) from None
    messages.success(request, f"Guardrail {row.name} deleted: {IN_FORCE}.")
    return redirect("dashboard:guardrails", account_id=account_id)


@login_required
def attachment_delete(request: HttpRequest, account_id: int, attachment_id: int) -> HttpResponse:
    """GET asks to confirm; POST detaches (never what the operator attached)."""
    seat = seat_of(user=request.user, account_id=account_id)
    attachment = get_object_or_404(attachments_of_account(account=seat.account), pk=attachment_id)
    require_change(seat)
    if attachment.attached_by == services.OPERATOR:
        raise PermissionDenied(
            "The operator attached this guardrail: only the operator can detach it."
        )
    template = "dashboard/guardrail_detach.html"
    if asking := asked_first(request, seat, template, attachment=attachment):
        return asking
    try:
        services.attachment_delete(attachment=attachment, actor=request_actor(request))
    except services.GuardrailRefused as exc:
        raise PermissionDenied(str(exc)) from None
    messages.success(request, f"Guardrail {attachment.guardrail.name} detached: {IN_FORCE}.")
    return redirect("dashboard:guardrails", account_id=account_id)
