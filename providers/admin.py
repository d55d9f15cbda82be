from django import forms
from django.contrib import admin
from django.db import transaction

from providers import services
from providers.models import ProviderModel, ProviderProfile


class ProviderModelInline(admin.TabularInline):
    model = ProviderModel
    extra = 0


class ProviderProfileForm(forms.ModelForm):
    platform_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Write-only: sealed at rest. Leave empty to keep the current key.",
    )

    class Meta:
        model = ProviderProfile
        fields = [
            "name",
            "kind",
            "base_url",
            "api_key_env",
            "allows_platform",
            "enabled",
            "timeout_s",
            "stream_idle_timeout_s",
        ]


@admin.register(ProviderProfile)
class ProviderProfileAdmin(admin.ModelAdmin):
    form = ProviderProfileForm
    list_display = ["name", "kind", "base_url", "allows_platform", "enabled", "key_last4"]
    readonly_fields = ["key_last4"]
    inlines = [ProviderModelInline]

    @admin.display(description="platform key")
    def key_last4(self, obj):
        return f"…{obj.api_key_last4}" if obj.api_key_last4 else "—"

    def save_model(self, request, obj, form, change):
        if form.cleaned_data.get("platform_key"):
            services.profile_set_platform_key(
                profile=obj, api_key=form.cleaned_data["platform_key"]
            )
        super().save_model(request, obj, form, change)

    # The admin saves inside a transaction: announce the change once it is committed, or
    # replicas reload before it is visible and keep the old config until the periodic reload.
    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        transaction.on_commit(services.profile_changed)

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        transaction.on_commit(services.profile_changed)
