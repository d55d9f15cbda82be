import functools

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group as PermissionGroup
from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts import access_groups, model_access, services, throttle, tokens
from accounts.forms import AdminSignInForm
from accounts.models import AccessGroup, ApiKey, Group, TenantToken
from audit.adminkit import AuditedDeletes, operator
from core.admin_views import Dollars
from core.tags import TagError, clean_tags

# The admin's login is throttled like the dashboard's (accounts/throttle.py).
admin.site.login_form = AdminSignInForm
_admin_login = admin.site.login


@functools.wraps(_admin_login)  # keeps Django's marks (login_not_required)
def throttled_admin_login(request: HttpRequest, extra_context=None) -> HttpResponse:
    """Answer the admin's login as Django does, a lockout as the dashboard does: 429 with
    Retry-After (the form and its message still shown)."""
    response = _admin_login(request, extra_context)
    form = (getattr(response, "context_data", None) or {}).get("form")
    throttled_s = getattr(form, "throttled_s", 0)
    if throttled_s:
        response.status_code = 429
        response["Retry-After"] = str(throttled_s)
    return response


# AdminSite.get_urls routes "login/" to `self.login`, read when config/urls.py is loaded.
admin.site.login = throttled_admin_login  # type: ignore[method-assign]  # replacing it is the point


class DefaultTagsForm(forms.ModelForm):
    """A group's or key's form: its default tags checked by the tenant API's rules."""

    def clean_default_tags(self):
        value = self.cleaned_data.get("default_tags") or []
        if not isinstance(value, list):
            raise forms.ValidationError('Default tags are a JSON list, e.g. ["team:search"].')
        try:
            return list(clean_tags(value))
        except TagError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Group)
class GroupAdmin(AuditedDeletes, Dollars, admin.ModelAdmin):
    form = DefaultTagsForm
    site_label = "Key groups"  # auth has its "Groups" too (core/admin_site.py)
    audit_type = "group"
    search_fields = ["name", "account__name"]
    list_filter = ["budget_period"]
    list_select_related = ["account"]
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
        before = (
            services.audited(Group.objects.get(pk=obj.pk), services.GROUP_AUDITED)
            if change
            else None
        )
        _save_changed(obj, form, change)
        action = "group.update" if change else "group.create"
        services.record_group(obj, action=action, actor=operator(request), before=before)
        services.group_changed(group=obj)

    def audit_before(self, obj):
        return services.audited(obj, services.GROUP_AUDITED)


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


class KeyStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("revoked", "Revoked"), ("expired", "Expired")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "active":
            live = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
            return queryset.filter(live, revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        return queryset


@admin.register(ApiKey)
class ApiKeyAdmin(AuditedDeletes, Dollars, admin.ModelAdmin):
    form = DefaultTagsForm
    audit_type = "key"
    search_fields = ["prefix", "name", "group__name", "group__account__name"]
    search_help_text = "A key's prefix (tg-…), its name, its group's or account's name."
    list_filter = [KeyStateFilter, "budget_period"]
    list_select_related = ["group"]
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
        revoked = [
            services.api_key_revoke(api_key=api_key, actor=operator(request))
            for api_key in queryset
        ]
        self.message_user(
            request,
            f"Revoked {', '.join(f'{k.prefix}…' for k in revoked)}: refused on every replica now.",
            messages.SUCCESS,
        )

    def save_model(self, request, obj, form, change):
        before = (
            services.audited(ApiKey.objects.get(pk=obj.pk), services.KEY_AUDITED)
            if change
            else None
        )
        _save_changed(obj, form, change)
        action = "key.update" if change else "key.create"
        services.record_key(obj, action=action, actor=operator(request), before=before)
        services.api_key_changed(api_key=obj)

    def audit_account_id(self, obj):
        return obj.group.account_id

    def audit_before(self, obj):
        return services.audited(obj, services.KEY_AUDITED)


@admin.register(TenantToken)
class TenantTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "created_at", "revoked_at"]
    search_fields = ["prefix", "user__username"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    exclude = ["token_hash"]
    readonly_fields = ["prefix", "user", "created_at"]

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        was = TenantToken.objects.get(pk=obj.pk).revoked_at
        super().save_model(request, obj, form, change)
        if was != obj.revoked_at:
            tokens.record_token(
                obj,
                action="token.revoke" if obj.revoked_at else "token.restore",
                actor=operator(request),
                before={"revoked_at": was},
                after={"revoked_at": obj.revoked_at},
            )

    def delete_model(self, request, obj):
        with transaction.atomic():
            self._record_delete(request, obj)
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for token in queryset:
                self._record_delete(request, token)
            super().delete_queryset(request, queryset)

    @staticmethod
    def _record_delete(request, token) -> None:
        before = {"prefix": token.prefix, "revoked_at": token.revoked_at}
        tokens.record_token(
            token, action="token.delete", actor=operator(request), before=before, after={}
        )


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


admin.site.unregister(PermissionGroup)


@admin.register(PermissionGroup)
class PermissionGroupAdmin(auth_admin.GroupAdmin):
    """Django's permission groups for staff who are not superusers."""

    site_label = "Staff permission groups"

    list_filter = ["permissions__content_type__app_label"]


class AccessGroupForm(forms.ModelForm):
    """An access group's admin form: its keys and groups must be its account's."""

    class Meta:
        model = AccessGroup
        fields = ["account", "name", "description", "entries", "keys", "groups"]

    def clean(self):
        data = super().clean()
        account = data.get("account")
        if account is not None:
            foreign = [k for k in data.get("keys", ()) if k.group.account_id != account.pk]
            foreign += [g for g in data.get("groups", ()) if g.account_id != account.pk]
            if foreign:
                raise forms.ValidationError(
                    f"Only keys and groups of {account} may be assigned; not {foreign[0]}."
                )
        return data


@admin.register(AccessGroup)
class AccessGroupAdmin(AuditedDeletes, admin.ModelAdmin):
    """Model access groups (accounts/model_access.py). Every change reaches every replica
    once saved with its assignments; deletes too."""

    form = AccessGroupForm
    audit_type = "access_group"
    list_display = ["name", "account", "entries", "created_at"]
    list_select_related = ["account"]
    search_fields = ["name", "account__name"]
    list_filter = [("account", admin.RelatedOnlyFieldListFilter)]
    filter_horizontal = ["keys", "groups"]

    def save_model(self, request, obj, form, change):
        # What it was, read before the save (kept on the row: this admin serves every request).
        obj.audit_was = (
            access_groups.audited_with_assignments(AccessGroup.objects.get(pk=obj.pk))
            if change
            else None
        )
        obj.entries = model_access.clean_entries(obj.entries)
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        # Assignments are saved here, after save_model: the replicas are told only then.
        super().save_related(request, form, formsets, change)
        obj = form.instance
        access_groups.record_admin_save(obj, before=obj.audit_was, actor=operator(request))

    def audit_before(self, obj):
        return access_groups.audited_with_assignments(obj)

    def delete_model(self, request, obj):
        account_id = obj.account_id
        super().delete_model(request, obj)
        services.account_changed(account_id=account_id)

    def delete_queryset(self, request, queryset):
        account_ids = sorted(set(queryset.values_list("account_id", flat=True)))
        super().delete_queryset(request, queryset)
        for account_id in account_ids:
            services.account_changed(account_id=account_id)
