"""The dashboard's Alerts page: the account's webhooks (added with their secret shown once,
"send a test", their delivery log) and alert rules (created and deleted here). Every write
goes through alerts.services, so it is audited like the tenant API's."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.models import Account, ApiKey, Group, validate_alert_pcts
from alerts import services
from alerts.channels import Unreachable
from alerts.models import AlertDelivery, AlertFiring, AlertRule, AlertWebhook
from audit.actors import request_actor
from core.money import AmountInvalid, parse_usd
from core.tags import TagError, clean_tag
from dashboard import selectors
from dashboard.access import require_change, seat_of
from dashboard.forms import field_of
from dashboard.pages import asked_first, page

DELIVERIES_SHOWN = 50
FIRINGS_SHOWN = 20


class WebhookForm(forms.Form):
    url = forms.URLField(label="URL", max_length=500, assume_scheme="https")
    description = forms.CharField(max_length=200, required=False)


class RuleForm(forms.Form):
    name = forms.CharField(max_length=200, required=False)
    scope = forms.ChoiceField(choices=AlertRule.Scope.choices)
    group = forms.ModelChoiceField(queryset=Group.objects.none(), required=False)
    api_key = forms.ModelChoiceField(queryset=ApiKey.objects.none(), required=False, label="Key")
    tag = forms.CharField(max_length=64, required=False)
    percents = forms.CharField(
        max_length=100,
        required=False,
        initial="50, 80, 100",
        help_text="Percents of the budget, comma separated; unused with an amount.",
    )
    amount = forms.CharField(
        label="Amount (USD)",
        max_length=32,
        required=False,
        help_text="Spend: fire when spent reaches it. Wallet: fire when the balance is below.",
    )
    emails = forms.CharField(
        max_length=2_000, required=False, help_text="Addresses to email, comma separated."
    )
    email_managers = forms.BooleanField(
        required=False, label="Also email the account's owners and admins"
    )

    def __init__(self, *args, account: Account, **kwargs):
        super().__init__(*args, **kwargs)
        self.account = account
        group = field_of(self, "group", forms.ModelChoiceField)
        group.queryset = selectors.groups_of_account(account=account)
        api_key = field_of(self, "api_key", forms.ModelChoiceField)
        api_key.queryset = selectors.api_keys_of_account(account=account)

    def clean(self) -> dict:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        scope = data.get("scope")
        if scope == AlertRule.Scope.GROUP and not data.get("group"):
            self.add_error("group", "Choose the group.")
        if scope == AlertRule.Scope.KEY and not data.get("api_key"):
            self.add_error("api_key", "Choose the key.")
        if scope == AlertRule.Scope.TAG:
            try:
                data["tag"] = clean_tag(data.get("tag", ""))
            except TagError as exc:
                self.add_error("tag", str(exc))
        try:
            data["amount_micro"] = parse_usd(data["amount"]) if data.get("amount") else None
        except AmountInvalid as exc:
            self.add_error("amount", str(exc))
        if scope == AlertRule.Scope.WALLET and not data.get("amount"):
            self.add_error("amount", "A wallet rule needs an amount.")
        try:
            pcts = [int(p) for p in (data.get("percents") or "").split(",") if p.strip()]
            validate_alert_pcts(pcts or [50, 80, 100])
            data["threshold_pcts"] = pcts or [50, 80, 100]
        except (ValueError, ValidationError):
            self.add_error("percents", "Whole percents from 1 to 100, each once.")
        emails = [e.strip() for e in (data.get("emails") or "").split(",") if e.strip()]
        for address in emails:
            try:
                forms.EmailField().clean(address)
            except ValidationError:
                self.add_error("emails", f"{address!r} is not an email address.")
        data["email_list"] = emails
        return data

    def rule_fields(self) -> dict:
        data = self.cleaned_data
        scope = data["scope"]
        return {
            "name": data["name"],
            "scope": scope,
            "group": data["group"] if scope == AlertRule.Scope.GROUP else None,
            "api_key": data["api_key"] if scope == AlertRule.Scope.KEY else None,
            "tag": data["tag"] if scope == AlertRule.Scope.TAG else "",
            "threshold_pcts": data["threshold_pcts"],
            "amount_micro": data["amount_micro"],
            "emails": data["email_list"],
            "email_managers": data["email_managers"],
        }


def _render(request, seat, **context) -> HttpResponse:
    account = seat.account
    hooks = AlertWebhook.objects.filter(account=account).order_by("id")
    rules = AlertRule.objects.filter(account=account).select_related("group", "api_key")
    return page(
        request,
        seat,
        "dashboard/alerts.html",
        hooks=hooks,
        rules=rules.order_by("id"),
        firings=AlertFiring.objects.filter(rule__account=account)
        .select_related("rule")
        .prefetch_related(
            Prefetch(
                "deliveries",
                AlertDelivery.objects.exclude(channel=AlertDelivery.Channel.SINK).select_related(
                    "webhook"
                ),
            )
        )
        .order_by("-created_at", "-id")[:FIRINGS_SHOWN],
        hook_form=context.pop("hook_form", None) or WebhookForm(),
        rule_form=context.pop("rule_form", None) or RuleForm(account=account),
        **context,
    )


@never_cache
@login_required
def alerts(request: HttpRequest, account_id: int) -> HttpResponse:
    """List webhooks and rules; add a webhook (its secret in this one response) or a rule."""
    seat = seat_of(user=request.user, account_id=account_id)
    if request.method != "POST":
        return _render(request, seat)
    require_change(seat)
    if "url" in request.POST:
        hook_form = WebhookForm(request.POST)
        if hook_form.is_valid():
            try:
                hook, secret = services.alert_webhook_create(
                    account=seat.account, actor=request_actor(request), **hook_form.cleaned_data
                )
            except Unreachable as exc:
                hook_form.add_error("url", str(exc))
            else:
                return _render(request, seat, created=hook, secret=secret)
        return _render(request, seat, hook_form=hook_form)
    rule_form = RuleForm(request.POST, account=seat.account)
    if rule_form.is_valid():
        rule = services.alert_rule_create(
            account=seat.account, actor=request_actor(request), **rule_form.rule_fields()
        )
        messages.success(request, f"Alert rule {rule} created.")
        return redirect("dashboard:alerts", account_id=account_id)
    return _render(request, seat, rule_form=rule_form)


@login_required
def rule_delete(request: HttpRequest, account_id: int, rule_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    rule = get_object_or_404(AlertRule.objects.filter(account=seat.account), pk=rule_id)
    require_change(seat)
    if asking := asked_first(request, seat, "dashboard/alert_delete.html", row=rule):
        return asking
    services.alert_rule_delete(rule=rule, actor=request_actor(request))
    messages.success(request, f"Alert rule {rule} deleted.")
    return redirect("dashboard:alerts", account_id=account_id)


@login_required
def webhook(request: HttpRequest, account_id: int, webhook_id: int) -> HttpResponse:
    """A webhook's delivery log: each delivery with its tries."""
    seat = seat_of(user=request.user, account_id=account_id)
    hook = get_object_or_404(AlertWebhook.objects.filter(account=seat.account), pk=webhook_id)
    deliveries = (
        AlertDelivery.objects.filter(webhook=hook)
        .prefetch_related("tries")
        .order_by("-created_at", "-id")[:DELIVERIES_SHOWN]
    )
    return page(request, seat, "dashboard/alert_webhook.html", hook=hook, deliveries=deliveries)


@login_required
@require_POST
def webhook_test(request: HttpRequest, account_id: int, webhook_id: int) -> HttpResponse:
    """Send a test: queued for a worker, listed in the webhook's log with its answer."""
    seat = seat_of(user=request.user, account_id=account_id)
    hook = get_object_or_404(AlertWebhook.objects.filter(account=seat.account), pk=webhook_id)
    require_change(seat)
    services.alert_webhook_test(hook=hook, actor=request_actor(request))
    messages.success(request, "Test alert queued: its delivery shows below in seconds.")
    return redirect("dashboard:alert-webhook", account_id=account_id, webhook_id=webhook_id)


@login_required
def webhook_delete(request: HttpRequest, account_id: int, webhook_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    hook = get_object_or_404(AlertWebhook.objects.filter(account=seat.account), pk=webhook_id)
    require_change(seat)
    if asking := asked_first(request, seat, "dashboard/alert_delete.html", row=hook):
        return asking
    services.alert_webhook_delete(hook=hook, actor=request_actor(request))
    messages.success(request, f"Webhook {hook.url} removed.")
    return redirect("dashboard:alerts", account_id=account_id)
