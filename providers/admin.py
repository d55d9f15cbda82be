from django import forms
from django.contrib import admin
from django.db import transaction

from audit import services as audit
from audit.adminkit import operator
from core.admin_views import Dollars
from core.money import PRICE_FIELDS
from providers import services, spec
from providers.models import PlatformKey, ProviderModel, ProviderProfile


class ProviderModelForm(forms.ModelForm):
    # Aliases are edited as one line, "a, b": an alias never holds a comma.
    aliases = forms.CharField(
        required=False,
        help_text="Other names clients may use for this model, separated by commas.",
    )

    class Meta:
        model = ProviderModel
        fields = [
            "name",
            "kind",
            "upstream",
            "aliases",
            *PRICE_FIELDS,
            "max_output_tokens",
            "cacheable",
            "cache_max_ttl_s",
            "cache_hit_price_pct",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["aliases"] = ", ".join(self.instance.aliases or [])

    def clean_aliases(self) -> list[str]:
        aliases = [part.strip() for part in self.cleaned_data["aliases"].split(",")]
        aliases = [alias for alias in aliases if alias]
        for alias in aliases:
            problem = spec.alias_problem(alias)
            if problem:
                raise forms.ValidationError(problem)
        return aliases


class ProviderModelFormSet(forms.BaseInlineFormSet):
    def clean(self):
        super().clean()
        models = [
            (form.cleaned_data["name"], form.cleaned_data.get("aliases") or [])
            for form in self.forms
            if form.cleaned_data.get("name") and not form.cleaned_data.get("DELETE")
        ]
        profile_kind = self.instance.kind
        for form in self.forms:
            if not form.cleaned_data.get("name") or form.cleaned_data.get("DELETE"):
                continue
            problem = spec.model_kind_problem(form.cleaned_data.get("kind"), profile_kind)
            if problem:
                raise forms.ValidationError(f"{form.cleaned_data['name']}: {problem}.")
        clash = spec.alias_clash(models)
        if clash is not None:
            raise forms.ValidationError(
                f"Alias {clash!r} is already a model name or alias of this profile."
            )


class ProviderModelInline(Dollars, admin.TabularInline):
    model = ProviderModel
    form = ProviderModelForm
    formset = ProviderModelFormSet
    extra = 0


def write_only_secret(help_text: str) -> forms.CharField:
    """A secret typed in, never shown again (sealed on save); empty keeps the stored one."""
    return forms.CharField(
        required=False, widget=forms.PasswordInput(render_value=False), help_text=help_text
    )


class PlatformKeyForm(forms.ModelForm):
    secret = write_only_secret(
        "Write-only: sealed at rest. Empty: keep the key (or use the variable)."
    )

    class Meta:
        model = PlatformKey
        fields = ["label", "secret", "api_key_env", "weight", "rpm", "tpm", "enabled", "status"]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("label") == services.OWN_KEY_LABEL:
            raise forms.ValidationError(
                f"The label {services.OWN_KEY_LABEL!r} names the profile's own key."
            )
        has_secret = bool(cleaned.get("secret")) or bool(self.instance.sealed)
        if has_secret == bool(cleaned.get("api_key_env")):
            raise forms.ValidationError(
                "A platform key is a secret or an environment variable's name, not both."
            )
        return cleaned


class PlatformKeyInline(admin.TabularInline):
    """More platform keys of the profile: its strategy spreads calls over them; a key the
    vendor refused (401 / 403) shows `failing` until an operator sets it active again."""

    model = PlatformKey
    form = PlatformKeyForm
    extra = 0
    readonly_fields = ["last4"]


class ProviderProfileForm(forms.ModelForm):
    platform_key = write_only_secret(
        "Write-only: sealed at rest. Leave empty to keep the current key."
    )

    class Meta:
        model = ProviderProfile
        fields = [
            "name",
            "kind",
            "base_url",
            "api_key_env",
            "key_strategy",
            "api_version",
            "region",
            "project",
            "allows_platform",
            "enabled",
            "timeout_s",
            "stream_idle_timeout_s",
            "passthrough",
            "page_micro",
            "rendered_page_micro",
            "query_micro",
            "respect_robots",
        ]

    def clean(self):
        cleaned = super().clean()
        units = {
            unit: cleaned.get(column)
            for unit, column in spec.UNIT_COLUMNS.items()
            if cleaned.get(column) is not None
        }
        # Models are judged by their own formset; a web profile's models would be refused there.
        problem = spec.units_problem(units, cleaned.get("kind"), has_models=False)
        if problem:
            raise forms.ValidationError(problem[0].upper() + problem[1:] + ".")
        return cleaned


@admin.register(ProviderProfile)
class ProviderProfileAdmin(Dollars, admin.ModelAdmin):
    form = ProviderProfileForm
    list_display = [
        "name",
        "kind",
        "base_url",
        "allows_platform",
        "passthrough",
        "enabled",
        "key_last4",
    ]
    readonly_fields = ["key_last4"]
    search_fields = ["name", "base_url", "models__name"]
    list_filter = ["kind", "enabled", "allows_platform"]
    inlines = [ProviderModelInline, PlatformKeyInline]

    @admin.display(description="platform key")
    def key_last4(self, obj):
        return f"…{obj.api_key_last4}" if obj.api_key_last4 else "—"

    def save_model(self, request, obj, form, change):
        # The trail compares the stored profile and models with them once all is saved.
        request._profile_before = services.profile_snapshot(obj.pk) if change else None
        if form.cleaned_data.get("platform_key"):
            services.seal_platform_key(profile=obj, api_key=form.cleaned_data["platform_key"])
        super().save_model(request, obj, form, change)

    def save_formset(self, request, form, formset, change):
        if formset.model is not PlatformKey:
            return super().save_formset(request, form, formset, change)
        for key_form in formset.forms:
            secret = key_form.cleaned_data.get("secret") if key_form.is_valid() else None
            if secret and not key_form.cleaned_data.get("DELETE"):
                services.platform_key_seal(key=key_form.instance, api_key=secret)
        befores = {k.pk: services.platform_key_state(k) for k in formset.queryset}
        actor = operator(request)
        # Deletions are recorded before they happen (a deleted row has no id left to name);
        # the admin's transaction holds the entries and the save together.
        for key_form in formset.deleted_forms:
            key = key_form.instance
            if key.pk is not None:
                services.platform_key_recorded(
                    key, action="platformkey.delete", actor=actor, before=befores.get(key.pk)
                )
        instances = formset.save()
        for key in instances:
            before = befores.get(key.pk)
            if before is None:
                services.platform_key_recorded(key, action="platformkey.add", actor=actor)
            elif before != services.platform_key_state(key):
                services.platform_key_recorded(
                    key, action="platformkey.update", actor=actor, before=before
                )
        return None

    # The admin saves inside a transaction: announce the change once it is committed, or
    # replicas reload before it is visible and keep the old config until the periodic reload.
    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        services.profile_recorded(
            profile=form.instance,
            before=getattr(request, "_profile_before", None),
            actor=operator(request),
        )
        transaction.on_commit(services.profile_changed)

    def delete_model(self, request, obj):
        self._record_delete(request, obj)
        super().delete_model(request, obj)
        transaction.on_commit(services.profile_changed)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for profile in queryset:
                self._record_delete(request, profile)
            super().delete_queryset(request, queryset)
        transaction.on_commit(services.profile_changed)

    @staticmethod
    def _record_delete(request, profile) -> None:
        audit.record(
            actor=operator(request),
            action="profile.delete",
            account_id=None,
            target_type="profile",
            target_id=profile.pk,
            target_label=profile.name,
            before=services.profile_snapshot(profile.pk),
        )
