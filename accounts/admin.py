from django.contrib import admin, messages
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model

from accounts import services, throttle
from accounts.forms import AdminSignInForm
from accounts.models import Account, ApiKey, Group, Membership, TenantToken
from core.admin_views import Dollars

# The admin's login is throttled like the dashboard's (accounts/throttle.py).
admin.site.login_form = AdminSignInForm


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Account)
class AccountAdmin(Dollars, admin.ModelAdmin):
    list_display = [
        "name",
        "billing_mode",
        "bandwidth_price_micro_per_gb",
        "markup_bp",
        "time_zone",
        "budget_alert_pcts",
    ]
    inlines = [MembershipInline]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if change and {"bandwidth_price_micro_per_gb", "markup_bp"} & set(form.changed_data):
            services.account_billing_changed(account=obj)


@admin.register(Group)
class GroupAdmin(Dollars, admin.ModelAdmin):
    list_display = [
        "name",
        "account",
        "budget_max_micro",
        "spent_micro",
        "reserved_micro",
        "settled_micro",
        "budget_period",
        "period_ends_at",
        "bandwidth_micro_usd_per_gb",
    ]
    readonly_fields = [
        "spent_micro",
        "reserved_micro",
        "settled_micro",
        "period_starts_at",
        "period_ends_at",
    ]

    def save_model(self, request, obj, form, change):
        _save_changed(obj, form, change)
        services.group_changed(group=obj)


def _save_changed(obj, form, change) -> None:
    """Save only what the form changed: the money counters and period bounds the row holds
    move under the ledger's locks meanwhile, and a whole-row save would write them back.
    A budget period chosen in the form starts with the period running now."""
    fields = list(form.changed_data)
    if "budget_period" in fields or (not change and obj.budget_period != "none"):
        fields += services.budget_period_start(target=obj)
    if not change:
        obj.save()
    elif fields:
        obj.save(update_fields=sorted(set(fields)))


@admin.register(ApiKey)
class ApiKeyAdmin(Dollars, admin.ModelAdmin):
    list_display = [
        "prefix",
        "name",
        "group",
        "budget_period",
        "created_at",
        "revoked_at",
        "expires_at",
    ]
    readonly_fields = [
        "prefix",
        "spent_micro",
        "reserved_micro",
        "period_starts_at",
        "period_ends_at",
        "created_at",
    ]
    exclude = ["key_hash"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # created through the tenant API or create_tenant, which show the secret

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        for api_key in queryset:
            services.api_key_revoke(api_key=api_key)

    def save_model(self, request, obj, form, change):
        _save_changed(obj, form, change)
        services.api_key_changed(api_key=obj)


@admin.register(TenantToken)
class TenantTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "created_at", "revoked_at"]
    exclude = ["token_hash"]
    readonly_fields = ["prefix", "user", "created_at"]

    def has_add_permission(self, request):
        return False


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class UserAdmin(auth_admin.UserAdmin):
    """Django's User admin, with the operator's way out of a sign-in lockout."""

    actions = ["clear_sign_in_lockouts"]

    @admin.action(description="Clear sign-in lockouts for selected users")
    def clear_sign_in_lockouts(self, request, queryset):
        # The name's lock, failures and strikes; an address is unlocked with `unlock_login`.
        try:
            cleared = [
                user.username for user in queryset if throttle.default.unlock_name(user.username)
            ]
        except throttle.StoreDown as exc:
            self.message_user(request, f"Nothing cleared: {exc}.", messages.ERROR)
            return
        if cleared:
            self.message_user(
                request, f"Cleared sign-in lockouts of: {', '.join(cleared)}.", messages.SUCCESS
            )
        else:
            self.message_user(request, "None of them had sign-in failures or a lockout.")
