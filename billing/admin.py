from django import forms
from django.contrib import admin, messages
from django.shortcuts import redirect, render

from billing import services
from billing.models import (
    BudgetAlert,
    BudgetPeriod,
    LedgerEntry,
    Reservation,
    SpendAdjustment,
    SpendHold,
    Wallet,
)
from core.admin_views import LargeTable, ReadOnly


class TopUpForm(forms.Form):
    amount_micro = forms.IntegerField(min_value=1, help_text="micro-USD (1 USD = 1,000,000)")
    reason = forms.CharField(max_length=200)


@admin.register(Wallet)
class WalletAdmin(admin.ModelAdmin):
    list_display = ["account", "balance_micro", "reserved_micro", "updated_at"]
    list_select_related = ["account"]
    readonly_fields = ["account", "balance_micro", "reserved_micro", "updated_at"]
    actions = ["top_up"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Top up selected wallets (writes a ledger entry)")
    def top_up(self, request, queryset):
        if "apply" in request.POST:
            form = TopUpForm(request.POST)
            if form.is_valid():
                for wallet in queryset:
                    services.wallet_credit(
                        wallet=wallet,
                        amount_micro=form.cleaned_data["amount_micro"],
                        reason=form.cleaned_data["reason"],
                    )
                self.message_user(
                    request, f"Topped up {queryset.count()} wallet(s).", messages.SUCCESS
                )
                return redirect(request.get_full_path())
        else:
            form = TopUpForm()
        return render(
            request,
            "admin/billing/top_up.html",
            {
                "form": form,
                "wallets": queryset,
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )


class ExcessFilter(admin.SimpleListFilter):
    title = "recorded excess"
    parameter_name = "excess"

    def lookups(self, request, model_admin):
        return [("yes", "Cost above the hold")]

    def queryset(self, request, queryset):
        return queryset.filter(excess_micro__gt=0) if self.value() == "yes" else queryset


@admin.register(Reservation)
class ReservationAdmin(LargeTable, admin.ModelAdmin):
    list_display = [
        "id",
        "wallet",
        "request_id",
        "amount_micro",
        "committed_micro",
        "excess_micro",
        "status",
        "created_at",
        "resolved_at",
    ]
    list_filter = ["status", ExcessFilter]
    search_fields = ["=request_id"]
    search_help_text = "An exact request id."
    list_select_related = ["wallet__account"]
    ordering = ["-id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(LargeTable, ReadOnly, admin.ModelAdmin):
    list_display = [
        "id",
        "wallet",
        "kind",
        "amount_micro",
        "balance_after_micro",
        "reason",
        "created_at",
    ]
    list_filter = ["kind"]
    list_select_related = ["wallet__account"]


@admin.register(SpendHold)
class SpendHoldAdmin(LargeTable, admin.ModelAdmin):
    list_display = ["request_id", "group", "api_key", "amount_micro", "status", "expires_at"]
    list_filter = ["status"]
    search_fields = ["=request_id"]
    search_help_text = "An exact request id."
    list_select_related = ["group", "api_key"]
    ordering = ["-id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(SpendAdjustment)
class SpendAdjustmentAdmin(admin.ModelAdmin):
    list_display = ["group", "window_start", "amount_micro", "reason", "created_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(BudgetPeriod)
class BudgetPeriodAdmin(ReadOnly, admin.ModelAdmin):
    list_display = [
        "group",
        "api_key",
        "budget_period",
        "starts_at",
        "ends_at",
        "budget_max_micro",
        "spent_micro",
        "closed_at",
    ]
    list_filter = ["budget_period"]
    list_select_related = ["group", "api_key"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnly, admin.ModelAdmin):
    list_display = [
        "id",
        "group",
        "api_key",
        "threshold_pct",
        "spent_micro",
        "budget_max_micro",
        "period_starts_at",
        "created_at",
        "delivery",
        "delivery_attempts",
        "delivered_at",
    ]
    list_filter = ["delivery", "threshold_pct"]
    list_select_related = ["group", "api_key"]
    exclude = ["key_scope", "period_scope"]
