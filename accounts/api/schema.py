"""OpenAPI pieces shared by the tenant API: the Token scheme and the one error body.

Imported by AccountsConfig.ready() so drf-spectacular knows the Token scheme before any
schema is generated.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import serializers

from accounts.api.errors import CODES


class TenantTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.TenantTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        scheme = build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Token"
        )
        scheme["description"] = (
            'Tenant API token: send "Authorization: Token <token>" '
            "(create_tenant prints one as api_token)."
        )
        return scheme


class ErrorDetailOut(serializers.Serializer):
    message = serializers.CharField(help_text="What went wrong, for a person.")
    type = serializers.CharField(help_text="The error's family, e.g. invalid_request_error.")
    code = serializers.CharField(help_text="Tollgate's stable code, LM-xxxx.")


class ErrorOut(serializers.Serializer):
    error = ErrorDetailOut()


# What each status means on the tenant API, for the docs.
_MEANINGS = {
    400: "The request is invalid (the message names the field).",
    401: "No valid tenant token or session.",
    403: "The caller may read this account but not change it (owners and admins only).",
    404: "No such object in the caller's accounts.",
    409: "The change conflicts with a limit.",
}


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """Return the documented error responses for these statuses, 401 always included."""
    out = {}
    for status in sorted({401, *statuses}):
        code, error_type = CODES[status]
        example = {"message": _MEANINGS[status], "type": error_type, "code": code}
        out[status] = OpenApiResponse(
            response=ErrorOut,
            description=_MEANINGS[status],
            examples=[
                OpenApiExample(
                    code,
                    value={"error": example},
                    status_codes=[status],
                    response_only=True,
                )
            ],
        )
    return out
