from django import forms
from django.contrib import admin, messages
from django.db.models import F
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path

from audit.adminkit import AuditedDeletes, operator
from billing import services
from billing.ledger.sql import Refused
from billing.models import (
    BudgetAlert,
    BudgetPeriod,
    LedgerEntry,
    Reservation,
    SpendAdjustment,
    SpendHold,
    TagBudget,
    TagSpend,
    Wallet,
)
from core.admin_views import DollarField, Dollars, LargeTable, ReadOnly, dollars
from core.money import MICRO_PER_USD, format_usd_exact


class WalletCreditForm(forms.Form):
    """A top-up or a correction, typed in dollars, with the reason the ledger keeps."""

    kind = forms.ChoiceField(
        choices=[
            (LedgerEntry.Kind.TOPUP, "Top-up: money the tenant paid for"),
            (LedgerEntry.Kind.ADJUSTMENT, "Adjustment: a correction, either way"),
        ],
        initial=LedgerEntry.Kind.TOPUP,
        widget=forms.RadioSelect,
    )
    amount = DollarField(
        allow_negative=True,
        help_text="In dollars: 5.00 is five dollars. A negative adjustment takes money away.",
    )
    reason = forms.CharField(max_length=200, help_text="Kept in the ledger with your name.")

    def clean(self):
        cleaned = super().clean()
        amount = cleaned.get("amount")
        if amount == 0:
            self.add_error("amount", "The amount must not be zero.")
        elif amount is not None and amount < 0 and cleaned.get("kind") == LedgerEntry.Kind.TOPUP:
            self.add_error("amount", "A top-up adds money; take money away with an adjustment.")
        return cleaned


class AvailableFilter(admin.SimpleListFilter):
    """Which wallets need money: what is available is the balance less what is held."""

    title = "available"
    parameter_name = "available"

    def lookups(self, request, model_admin):
        return [
            ("none", "Nothing ($0.00 or less)"),
            ("low", "Under $1.00"),
            ("funded", "$1.00 or more"),
        ]

    def queryset(self, request, queryset):
        available = F("balance_micro") - F("reserved_micro")
        queryset = queryset.alias(available=available)
        if self.value() == "none":
            return queryset.filter(available__lte=0)
        if self.value() == "low":
            return queryset.filter(available__gt=0, available__lt=MICRO_PER_USD)
        if self.value() == "funded":
            return queryset.filter(available__gte=MICRO_PER_USD)
        return queryset


@admin.register(Wallet)
class WalletAdmin(AuditedDeletes, Dollars, admin.ModelAdmin):
    audit_type = "wallet"
    list_display = ["account", "balance_micro", "reserved_micro", "available", "updated_at"]
    list_select_related = ["account"]
    readonly_fields = ["account", "balance_micro", "reserved_micro", "updated_at"]
    search_fields = ["account__name"]
    list_filter = [AvailableFilter]
    actions = ["credit"]

    def has_add_permission(self, request):
        return False

    def audit_before(self, obj):
        return {"balance_micro": obj.balance_micro, "reserved_micro": obj.reserved_micro}

    # A wallet's own page has a Top up button (templates/admin/billing/wallet/change_form.html):
    # the list action's steps for that one wallet, then back to its page.
    def get_urls(self):
        top_up = path(
            "<path:object_id>/top-up/",
            self.admin_site.admin_view(self.top_up_view),
            name="billing_wallet_top_up",
        )
        return [top_up, *super().get_urls()]

    def top_up_view(self, request, object_id: str):
        wallets = Wallet.objects.filter(pk=object_id)
        if not wallets.exists() or not self.has_change_permission(request, wallets.first()):
            raise Http404
        answer = self.credit(request, wallets)
        if answer.status_code == 302:
            return redirect("admin:billing_wallet_change", object_id)
        return answer

    @admin.display(description="available (USD)")
    def available(self, wallet: Wallet) -> str:
        return dollars(wallet.balance_micro - wallet.reserved_micro)

    @admin.action(description="Top up or adjust selected wallets (asks to confirm)")
    def credit(self, request, queryset):
        """Three steps: the form, a confirmation of each wallet's balance before and after,
        then one ledger entry per wallet, signed with the operator's username."""
        wallets = list(queryset.select_related("account").order_by("account__name"))
        form = WalletCreditForm(request.POST if "amount" in request.POST else None)
        confirmed = "apply" in request.POST
        if form.is_bound and form.is_valid():
            amount, kind = form.cleaned_data["amount"], form.cleaned_data["kind"]
            if confirmed:
                self._apply_credit(request, wallets, form.cleaned_data)
                return redirect(request.get_full_path())
            step = "confirm"
        else:
            amount, kind, step = None, None, "form"
        return render(
            request,
            "admin/billing/credit.html",
            {
                **self.admin_site.each_context(request),
                "title": "Top up or adjust wallets",
                "step": step,
                "form": form,
                "kind": {"topup": "A top-up", "adjustment": "An adjustment"}.get(kind, ""),
                "amount": format_usd_exact(amount) if amount is not None else "",
                # Every digit, as the message after it says the balance: the confirmation
                # and the result agree (docs/money-and-limits.md, "Money for humans").
                "wallets": [
                    {
                        "wallet": w,
                        "balance": format_usd_exact(w.balance_micro),
                        "after": format_usd_exact(w.balance_micro + amount) if amount else "",
                    }
                    for w in wallets
                ],
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )

    def _apply_credit(self, request, wallets: list[Wallet], data: dict) -> None:
        amount = data["amount"]
        verb = "Topped up" if data["kind"] == LedgerEntry.Kind.TOPUP else "Adjusted"
        for wallet in wallets:
            try:
                entry = services.wallet_credit(
                    wallet=wallet,
                    amount_micro=amount,
                    kind=data["kind"],
                    reason=data["reason"],
                    actor=operator(request),
                )
            except Refused:
                self.message_user(
                    request,
                    f"{wallet.account}'s wallet was not changed: {format_usd_exact(amount)}"
                    " would take it below what its requests in flight hold.",
                    messages.ERROR,
                )
                continue
            # The admin's own history too (its "Recent actions" and the wallet's history page).
            change = f"{verb} by {format_usd_exact(amount)}: {data['reason']}"
            self.log_change(request, wallet, change)
            self.message_user(
                request,
                f"{verb} {wallet.account}'s wallet by {format_usd_exact(amount)}: balance now"
                f" {format_usd_exact(entry.balance_after_micro)} (ledger entry {entry.pk}).",
                messages.SUCCESS,
            )


class ExcessFilter(admin.SimpleListFilter):
    title = "recorded excess"
    parameter_name = "excess"

    def lookups(self, request, model_admin):
        return [("yes", "Cost above the hold")]

    def queryset(self, request, queryset):
        return queryset.filter(excess_micro__gt=0) if self.value() == "yes" else queryset


@admin.register(Reservation)
class ReservationAdmin(Dollars, LargeTable, admin.ModelAdmin):
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
class LedgerEntryAdmin(Dollars, LargeTable, ReadOnly, admin.ModelAdmin):
    list_display = [
        "id",
        "wallet",
        "kind",
        "amount_micro",
        "balance_after_micro",
        "reason",
        "actor",
        "created_at",
    ]
    list_filter = ["kind"]
    search_fields = ["=wallet_id", "=actor", "=reservation_id"]
    search_help_text = "A wallet id, an operator's username, or a reservation id."
    list_select_related = ["wallet__account"]


@admin.register(SpendHold)
class SpendHoldAdmin(Dollars, LargeTable, admin.ModelAdmin):
    list_display = [
        "request_id", "group", "key", "reserved_on_key", "amount_micro", "status", "expires_at"
    ]  # fmt: skip
    list_filter = ["status"]
    search_fields = ["=request_id"]
    search_help_text = "An exact request id."
    list_select_related = ["group", "api_key", "request_key"]
    ordering = ["-id"]

    @admin.display(description="key")
    def key(self, hold: SpendHold):
        # A hold from before billing 0015 names its key only when it reserved on it.
        return hold.request_key or hold.api_key

    @admin.display(description="reserved on the key", boolean=True)
    def reserved_on_key(self, hold: SpendHold) -> bool:
        return hold.api_key_id is not None

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(SpendAdjustment)
class SpendAdjustmentAdmin(Dollars, admin.ModelAdmin):
    list_display = ["group", "window_start", "amount_micro", "reason", "created_at"]
    search_fields = ["group__name", "reason"]
    list_filter = ["created_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(BudgetPeriod)
class BudgetPeriodAdmin(Dollars, ReadOnly, admin.ModelAdmin):
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
    search_fields = ["group__name", "api_key__name"]
    list_select_related = ["group", "api_key"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(Dollars, ReadOnly, admin.ModelAdmin):
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
    search_fields = ["group__name", "api_key__name"]
    list_select_related = ["group", "api_key"]
    exclude = ["key_scope", "period_scope"]


@admin.register(TagBudget)
class TagBudgetAdmin(Dollars, ReadOnly, admin.ModelAdmin):
    """Tenants set tag budgets (API, dashboard: audited, live on every replica)."""

    list_display = ["tag", "account", "budget_max_micro", "budget_period", "created_at"]
    list_filter = ["budget_period"]
    search_fields = ["tag", "account__name"]
    list_select_related = ["account"]


@admin.register(TagSpend)
class TagSpendAdmin(Dollars, ReadOnly, admin.ModelAdmin):
    list_display = ["tag", "account", "period", "spent_micro", "reserved_micro"]
    list_filter = ["period"]
    search_fields = ["tag", "account__name"]
    list_select_related = ["account"]
