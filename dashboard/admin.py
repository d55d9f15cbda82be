"""The operator's view of a tenant, in the Django admin: the account page (its wallet, groups,
keys, money in flight and spend; suspend and resume) and dashboard logins (a one-time
set-password link). Here, the top layer, because the page reads every app's records."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.html import format_html

from accounts import services
from accounts.directory import directory_roles_changed
from accounts.logins import password_link_issue
from accounts.models import Account, Membership
from accounts.services import account_changed
from audit import services as audit
from audit.adminkit import AuditedDeletes, operator
from billing.selectors import in_flight
from core.admin_views import Dollars, dollars, html_table
from core.money import finest_places
from dashboard.selectors import Overview, api_keys_of_account, overview, spend_micro
from usage.selectors import usage_totals


class MembershipInline(admin.StackedInline):  # labelled fields: the tabular one has none
    model = Membership
    extra = 0


class SuspendedFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("suspended", "Suspended")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(suspended_at__isnull=True)
        if self.value() == "suspended":
            return queryset.filter(suspended_at__isnull=False)
        return queryset


class PercentField(forms.DecimalField):
    """The account's markup typed as a percentage of provider cost ("125" is 125 %, cost and a
    quarter); the model keeps basis points (12500)."""

    def __init__(self, **kwargs) -> None:
        kwargs.update(max_digits=9, decimal_places=2, min_value=Decimal("0.01"))
        super().__init__(**kwargs)

    def prepare_value(self, value):
        if isinstance(value, int):
            return f"{(Decimal(value) / 100).normalize():f}"  # 12500 -> "125", 12550 -> "125.5"
        return value

    def clean(self, value):
        percent = super().clean(value)
        return None if percent is None else int(percent * 100)

    def has_changed(self, initial, data) -> bool:
        try:
            percent = self.to_python(data)
        except forms.ValidationError:
            return True
        return initial != (None if percent is None else int(percent * 100))


class SuspendForm(forms.Form):
    reason = forms.CharField(
        max_length=200, help_text="Kept on the account and shown to operators, not to clients."
    )


def _overview(account: Account) -> Overview:
    """The account's overview, read once per page: its fields share one (the page's own
    account object carries it)."""
    if not hasattr(account, "_overview"):
        account._overview = overview(account=account)  # type: ignore[attr-defined]  # a memo
    return account._overview  # type: ignore[attr-defined]  # the memo, set above


OVERVIEW = ("state", "wallet_now", "money_in_flight", "spend", "groups_now", "keys_now")


def _member_entry(request, action: str, member: dict, before: dict, after: dict) -> None:
    audit.record(
        actor=operator(request),
        action=action,
        account_id=member["account_id"],
        target_type="member",
        target_id=member["id"],
        target_label=member["user"],
        before=before,
        after=after,
    )


def _member(membership: Membership) -> dict:
    return {
        "id": membership.pk,
        "account_id": membership.account_id,
        "user": membership.user.get_username(),
        "role": membership.role,
    }


def record_member_saved(request, membership: Membership, was: dict | None) -> None:
    """Record an operator's membership added (was None) or changed in the admin."""
    now = _member(membership)
    if was is None:
        after = {"user": now["user"], "role": now["role"]}
        _member_entry(request, "member.add", now, {}, after)
        return
    old, new = audit.changes(
        {"user": was["user"], "role": was["role"]}, {"user": now["user"], "role": now["role"]}
    )
    if old or new:
        action = "member.role" if set(new) == {"role"} else "member.update"
        _member_entry(request, action, now, old, new)


@admin.register(Account)
class AccountAdmin(AuditedDeletes, Dollars, admin.ModelAdmin):
    list_display = ["name", "state", "billing_mode", "bandwidth_price_micro_per_gb", "time_zone"]
    list_filter = [SuspendedFilter, "billing_mode"]
    search_fields = ["name"]
    inlines = [MembershipInline]
    actions = ["suspend", "resume"]
    readonly_fields = OVERVIEW
    fieldsets = [
        ("Overview", {"fields": OVERVIEW}),
        (
            "Settings",
            {
                "fields": [
                    "name",
                    "billing_mode",
                    "bandwidth_price_micro_per_gb",
                    "markup_bp",
                    "time_zone",
                    "budget_alert_pcts",
                    "directory_roles",
                    "trace_content",
                ]
            },
        ),
    ]

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        return fieldsets if obj is not None else fieldsets[1:]  # nothing to show before it exists

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "markup_bp":
            return PercentField(
                label="Markup (% of provider cost)",
                initial=db_field.default,
                help_text="100 charges the provider's cost as it is; 125 adds a quarter."
                " Groups' bandwidth rate is the price divided by it.",
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    audit_type = "account"

    def save_model(self, request, obj, form, change):
        before = (
            services.audited(Account.objects.get(pk=obj.pk), services.ACCOUNT_AUDITED)
            if change
            else None
        )
        super().save_model(request, obj, form, change)
        action = "account.update" if change else "account.create"
        services.record_account(obj, action=action, actor=operator(request), before=before)
        if change and {"bandwidth_price_micro_per_gb", "markup_bp"} & set(form.changed_data):
            services.account_billing_changed(account=obj)
        if change and "trace_content" in form.changed_data:  # the gateways' principals carry it
            account_changed(account_id=obj.pk)
        if change and "directory_roles" in form.changed_data:
            # Provisioned members take the new map's roles (accounts/directory.py).
            directory_roles_changed.send(sender=Account, account=obj, actor=operator(request))

    def save_formset(self, request, form, formset, change):
        """The members inline: each membership added, changed or removed is recorded."""
        was = {
            f.instance.pk: _member(f.instance)
            for f in formset.initial_forms
            if f.instance.pk is not None
        }
        removed = [was[f.instance.pk] for f in formset.deleted_forms if f.instance.pk in was]
        super().save_formset(request, form, formset, change)
        for membership in formset.new_objects:
            record_member_saved(request, membership, None)
        for membership, _fields in formset.changed_objects:
            record_member_saved(request, membership, was.get(membership.pk))
        for member in removed:
            before = {"user": member["user"], "role": member["role"]}
            _member_entry(request, "member.remove", member, before, {})

    def audit_account_id(self, obj):
        return obj.pk

    def audit_before(self, obj):
        return services.audited(obj, services.ACCOUNT_AUDITED)

    # ------------------------------------------------------------ the overview

    @admin.display(description="state")
    def state(self, account: Account) -> str:
        if account.suspended_at is None:
            return "active"
        return format_html(
            '<strong class="suspended">suspended</strong> since {} UTC: {}',
            f"{account.suspended_at:%Y-%m-%d %H:%M}",
            account.suspended_reason or "no reason given",
        )

    @admin.display(description="wallet")
    def wallet_now(self, account: Account) -> str:
        wallet = _overview(account).wallet
        if wallet is None:
            return "no wallet (invoiced: bounded by its budgets)"
        places = finest_places([wallet.reserved_micro])  # beside a sub-cent hold, its digits
        return format_html(
            "balance {}, held by requests in flight {}, available {}",
            dollars(wallet.balance_micro, places),
            dollars(wallet.reserved_micro),
            dollars(wallet.balance_micro - wallet.reserved_micro, places),
        )

    @admin.display(description="in flight")
    def money_in_flight(self, account: Account) -> str:
        held = in_flight(account=account)
        (holds, held_micro), (reserved, reserved_micro) = held["holds"], held["reservations"]
        return format_html(
            "{} budget hold(s) of {}; {} wallet reservation(s) of {}",
            holds,
            dollars(held_micro),
            reserved,
            dollars(reserved_micro),
        )

    @admin.display(description="spend")
    def spend(self, account: Account) -> str:
        now = timezone.now()
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        view = _overview(account)
        [totals] = usage_totals(accounts=[account.pk], start=month, end=now)
        return format_html(
            "today {} ({} requests); this month (UTC) {} ({} requests)",
            dollars(view.today_micro),
            view.requests_today,
            dollars(spend_micro(totals)),
            totals["requests"],
        )

    @admin.display(description="groups")
    def groups_now(self, account: Account) -> str:
        rows = [
            (
                g.group.name,
                dollars(g.group.budget_max_micro) if g.group.budget_max_micro else "no budget",
                dollars(g.period_micro),
                dollars(g.group.reserved_micro),
                dollars(g.today_micro),
            )
            for g in _overview(account).groups
        ]
        headers = ["group", "budget", "spent this period", "held in flight", "spent today"]
        return html_table(headers, rows, empty="no groups", css_class="overview")

    @admin.display(description="keys")
    def keys_now(self, account: Account) -> str:
        now = timezone.now()
        rows = [
            (
                f"{key.prefix}…",
                key.name or "—",
                key.group.name,
                "revoked"
                if key.revoked_at
                else "expired"
                if key.expires_at and key.expires_at <= now
                else "active",
                dollars(key.budget_max_micro) if key.budget_max_micro else "no budget",
            )
            for key in api_keys_of_account(account=account)[:50]
        ]
        return html_table(
            ["key", "name", "group", "state", "budget"], rows, empty="no keys", css_class="overview"
        )

    # ------------------------------------------------------------ suspend and resume

    @admin.action(description="Suspend selected accounts (their keys are refused at once)")
    def suspend(self, request, queryset):
        form = SuspendForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            for account in queryset:
                if services.account_suspend(
                    account=account, reason=form.cleaned_data["reason"], actor=operator(request)
                ):
                    self.message_user(
                        request,
                        f"Suspended {account}: its keys are refused (LM-1004) on every replica.",
                        messages.SUCCESS,
                    )
                else:
                    self.message_user(request, f"{account} was suspended already.")
            return redirect(request.get_full_path())
        return render(
            request,
            "admin/accounts/suspend.html",
            {
                **self.admin_site.each_context(request),
                "title": "Suspend accounts",
                "form": form,
                "accounts": list(queryset),
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(description="Resume selected accounts")
    def resume(self, request, queryset):
        for account in queryset:
            if services.account_resume(account=account, actor=operator(request)):
                self.message_user(
                    request, f"Resumed {account}: its keys are served again.", messages.SUCCESS
                )
            else:
                self.message_user(request, f"{account} was not suspended.")


@admin.register(Membership)
class MembershipAdmin(AuditedDeletes, admin.ModelAdmin):
    list_display = ["user", "account", "role"]
    list_filter = ["role"]
    search_fields = ["user__username", "account__name"]
    actions = ["issue_password_link"]
    audit_type = "member"
    audit_delete_action = "member.remove"

    def save_model(self, request, obj, form, change):
        was = _member(Membership.objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        record_member_saved(request, obj, was)

    def audit_before(self, obj):
        return {"user": obj.user.get_username(), "role": obj.role}

    def audit_label(self, obj):
        return obj.user.get_username()

    @admin.action(description="Issue a one-time set-password link for the dashboard")
    def issue_password_link(self, request, queryset):
        for membership in queryset.select_related("user"):
            link = request.build_absolute_uri(password_link_issue(user=membership.user))
            # Shown once to the operator, who hands it to the member; never logged.
            shown = format_html(
                '{}: <code data-copy="Copy the link">{}</code>', membership.user, link
            )
            self.message_user(request, shown, messages.SUCCESS)
