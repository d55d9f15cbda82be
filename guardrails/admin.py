"""The operator's guardrails: define every kind (the operator's with no account, or one
account's), attach them to accounts, groups or keys, take over a tenant's attachment. A
webhook guardrail's secret is shown once, in the message after its creation or a rotation;
never on a page after. Every save and delete goes on the audit trail and evicts the
gateways' cached principals of the accounts it touches (guardrails/services.py)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.utils import timezone

from accounts.services import audited
from audit.adminkit import operator
from guardrails import services
from guardrails.models import ATTACHMENTS_PER_ACCOUNT_MAX, Guardrail, GuardrailAttachment
from guardrails.rules import GuardrailInvalid, check_guardrail


class GuardrailForm(forms.ModelForm):
    webhook_url = forms.URLField(max_length=500, required=False, assume_scheme="https")

    class Meta:
        model = Guardrail
        fields = "__all__"

    # An empty box is an empty list (the column holds a list, never null).
    def clean_detectors(self) -> list:
        return self.cleaned_data["detectors"] or []

    def clean_patterns(self) -> list:
        return self.cleaned_data["patterns"] or []

    def clean_words(self) -> list:
        return self.cleaned_data["words"] or []

    def _post_clean(self) -> None:
        super()._post_clean()  # type: ignore[misc]  # the instance now holds the form's values
        if self.errors:
            return
        try:
            check_guardrail(self.instance)
        except GuardrailInvalid as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, exc.message)


@admin.register(Guardrail)
class GuardrailAdmin(admin.ModelAdmin):
    form = GuardrailForm
    list_display = ("id", "name", "account", "kind", "phase", "action", "fail_mode", "enabled")
    list_filter = ("kind", "phase", "action", "fail_mode", "enabled")
    search_fields = ("name", "description", "account__name", "moderation_model", "webhook_url")
    raw_id_fields = ("account",)
    readonly_fields = ("secret_prefix", "created_at", "updated_at")
    actions = ["rotate_secret"]

    def get_readonly_fields(self, request, obj=None):
        fixed = ("account", "kind") if obj is not None else ()
        return (*self.readonly_fields, *fixed)

    def save_model(self, request, obj, form, change):
        before = audited(Guardrail.objects.get(pk=obj.pk), services.AUDITED) if change else None
        obj.updated_at = timezone.now()
        super().save_model(request, obj, form, change)
        if not change and obj.kind == Guardrail.Kind.WEBHOOK:
            secret = services.seal_new_secret(obj)
            self.message_user(
                request,
                f"The webhook's signing secret, shown this once: {secret}",
                messages.WARNING,
            )
        services.guardrail_recorded(guardrail=obj, before=before, actor=operator(request))

    def delete_model(self, request, obj):
        services.guardrail_delete(guardrail=obj, by=services.OPERATOR, actor=operator(request))

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for guardrail in queryset:
                services.guardrail_delete(
                    guardrail=guardrail, by=services.OPERATOR, actor=operator(request)
                )

    @admin.action(description="Give the selected webhook guardrails new signing secrets")
    def rotate_secret(self, request, queryset):
        for guardrail in queryset.filter(kind=Guardrail.Kind.WEBHOOK):
            secret = services.guardrail_rotate_secret(guardrail=guardrail, actor=operator(request))
            self.message_user(
                request,
                f"{guardrail.name}'s new secret, shown this once: {secret}",
                messages.WARNING,
            )


class AttachmentForm(forms.ModelForm):
    class Meta:
        model = GuardrailAttachment
        fields = ("guardrail", "account", "group", "api_key", "attached_by")

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk is not None or self.errors:
            return cleaned
        try:
            services.check_attachment(
                guardrail=cleaned["guardrail"],
                account=cleaned["account"],
                group=cleaned.get("group"),
                api_key=cleaned.get("api_key"),
            )
        except GuardrailInvalid as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
            return cleaned
        if (
            GuardrailAttachment.objects.filter(account=cleaned["account"]).count()
            >= ATTACHMENTS_PER_ACCOUNT_MAX
        ):
            self.add_error(
                "account",
                f"An account has at most {ATTACHMENTS_PER_ACCOUNT_MAX} guardrail attachments.",
            )
        return cleaned


@admin.register(GuardrailAttachment)
class GuardrailAttachmentAdmin(admin.ModelAdmin):
    form = AttachmentForm
    list_display = ("id", "guardrail", "account", "group", "api_key", "attached_by", "created_at")
    list_filter = ("attached_by", "guardrail__kind")
    search_fields = ("guardrail__name", "account__name", "group__name", "api_key__name")
    raw_id_fields = ("guardrail", "account", "group", "api_key")

    def get_changeform_initial_data(self, request):
        return {
            "attached_by": GuardrailAttachment.By.OPERATOR,
            **super().get_changeform_initial_data(request),
        }

    def get_readonly_fields(self, request, obj=None):
        # Where it applies never changes (detach and attach again); who owns it may: the
        # operator takes a tenant's attachment over by making it the operator's.
        return ("guardrail", "account", "group", "api_key") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        before = None
        if change:
            before = services.attachment_audited(GuardrailAttachment.objects.get(pk=obj.pk))
        super().save_model(request, obj, form, change)
        services.attachment_recorded(attachment=obj, before=before, actor=operator(request))

    def delete_model(self, request, obj):
        services.attachment_delete(attachment=obj, by=services.OPERATOR, actor=operator(request))

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for attachment in queryset:
                services.attachment_delete(
                    attachment=attachment, by=services.OPERATOR, actor=operator(request)
                )
