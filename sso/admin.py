"""The operators' view of single sign-on: every account's provider, and the identity links."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from audit.adminkit import AuditedDeletes, operator
from sso.models import IdentityLink, Provider
from sso.oidc import check_issuer
from sso.services import AUDITED, password_off_refusal, provider_save


class ProviderAdminForm(forms.ModelForm):
    issuer = forms.URLField(max_length=500, assume_scheme="https")
    client_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Sealed at rest, never shown. Leave empty to keep the one saved.",
    )

    class Meta:
        model = Provider
        fields = ("account", *AUDITED)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        issuer = data.get("issuer")
        if issuer and (why := check_issuer(issuer)):
            self.add_error("issuer", why)
        account = data.get("account") or getattr(self.instance, "account", None)
        if account is not None and issuer:
            why = password_off_refusal(
                account_id=account.pk,
                issuer=issuer,
                enabled=bool(data.get("enabled")),
                password_sign_in=bool(data.get("password_sign_in")),
            )
            if why:
                self.add_error("password_sign_in", why)
        if not self.instance.pk and not data.get("client_secret"):
            self.add_error("client_secret", "A new provider needs its client secret.")
        return data


@admin.register(Provider)
class ProviderAdmin(AuditedDeletes, admin.ModelAdmin):
    form = ProviderAdminForm
    audit_type = "sso"
    audit_delete_action = "sso.settings"
    list_display = ("account", "display_name", "issuer", "enabled", "password_sign_in")
    list_filter = ("enabled", "password_sign_in")
    search_fields = ("account__name", "issuer", "client_id")

    def get_readonly_fields(self, request, obj=None):
        return ("account",) if obj is not None else ()

    def save_model(self, request, obj, form, change) -> None:
        fields = {name: form.cleaned_data[name] for name in AUDITED}
        saved = provider_save(
            account=form.cleaned_data.get("account") or obj.account,
            actor=operator(request),
            client_secret=form.cleaned_data.get("client_secret") or "",
            **fields,
        )
        obj.pk = saved.pk

    def audit_before(self, obj: Provider) -> dict:
        return {"issuer": obj.issuer, "client_id": obj.client_id, "deleted": True}


@admin.register(IdentityLink)
class IdentityLinkAdmin(AuditedDeletes, admin.ModelAdmin):
    """Read-only but for delete: a link is made by a sign-in, never typed in."""

    audit_type = "sso"
    audit_delete_action = "sso.unlink"
    list_display = ("subject", "issuer", "user", "email", "last_sign_in_at")
    list_filter = ("issuer",)
    search_fields = ("subject", "issuer", "user__username", "email")
    readonly_fields = ("issuer", "subject", "user", "email", "created_at", "last_sign_in_at")

    def has_add_permission(self, request) -> bool:
        return False

    def audit_account_id(self, obj: IdentityLink) -> int | None:
        return None

    def audit_before(self, obj: IdentityLink) -> dict:
        return {"issuer": obj.issuer, "subject": obj.subject, "user": obj.user.get_username()}
