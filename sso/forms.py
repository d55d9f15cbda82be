"""The provider settings form: the account owner's page and the operators' admin share it."""

from __future__ import annotations

from typing import Any

from django import forms

from sso.models import Provider
from sso.oidc import check_issuer


class ProviderForm(forms.Form):
    display_name = forms.CharField(
        max_length=60, initial="single sign-on", help_text='The button reads "Sign in with …".'
    )
    issuer = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text="Your provider's issuer, e.g. https://example.okta.com.",
    )
    client_id = forms.CharField(max_length=255)
    client_secret = forms.CharField(
        max_length=1000,
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Sealed at rest, never shown again. Leave empty to keep the one saved.",
    )
    jit_domains = forms.CharField(
        label="Just-in-time email domains",
        max_length=2000,
        required=False,
        help_text="Comma separated. A verified email in one of these joins on first sign-in.",
    )
    jit_role = forms.ChoiceField(
        label="Just-in-time role",
        choices=Provider.JitRole.choices,
        help_text="For a new member whose groups map to no role.",
    )
    groups_claim = forms.CharField(
        max_length=100, initial="groups", help_text="The ID token claim listing the groups."
    )
    enabled = forms.BooleanField(required=False, label="Single sign-on enabled")
    password_sign_in = forms.BooleanField(
        required=False, initial=True, label="Members may also sign in with a password"
    )

    @classmethod
    def initial_of(cls, provider: Provider | None) -> dict[str, Any]:
        if provider is None:
            return {"password_sign_in": True, "groups_claim": "groups", "jit_role": "viewer"}
        return {
            "display_name": provider.display_name,
            "issuer": provider.issuer,
            "client_id": provider.client_id,
            "jit_domains": ", ".join(provider.jit_domains),
            "jit_role": provider.jit_role,
            "groups_claim": provider.groups_claim,
            "enabled": provider.enabled,
            "password_sign_in": provider.password_sign_in,
        }

    def clean_issuer(self) -> str:
        issuer = self.cleaned_data["issuer"]
        if why := check_issuer(issuer):
            raise forms.ValidationError(why)
        return issuer

    def clean_jit_domains(self) -> list[str]:
        raw = self.cleaned_data["jit_domains"]
        domains = [d.strip().lower().lstrip("@") for d in raw.split(",") if d.strip()]
        if any(" " in d or "@" in d or "." not in d for d in domains):
            raise forms.ValidationError("List domains like example.com, comma separated.")
        return sorted(set(domains))

    def provider_fields(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        data.pop("client_secret")
        return data
