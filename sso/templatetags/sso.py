from django import template
from django.urls import reverse

from sso.operators import operator_provider

register = template.Library()


@register.inclusion_tag("sso/operator_button.html")
def operator_sso_button() -> dict:
    """The admin login's "Sign in with …" link, when the operators have a provider."""
    conf = operator_provider()
    if conf is None:
        return {"url": ""}
    return {"url": reverse("sso:operator-start"), "name": conf["NAME"]}
