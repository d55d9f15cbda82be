"""SCIM's own error language (RFC 7644 §3.12): a SCIM route answers its errors in SCIM's
error schema with application/scim+json, never in the tenant API's format."""

from __future__ import annotations

import orjson
from django.http import HttpResponse

ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
CONTENT_TYPE = "application/scim+json"


class ScimError(Exception):
    """A refusal: its HTTP status, SCIM's scimType where the RFC names one, a detail."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.scim_type = status, detail, scim_type

    def response(self) -> HttpResponse:
        body: dict = {"schemas": [ERROR_SCHEMA], "status": str(self.status), "detail": self.detail}
        if self.scim_type:
            body["scimType"] = self.scim_type
        response = scim_response(body, status=self.status)
        if self.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="SCIM"'
        return response


def scim_response(body: object, *, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(body), status=status, content_type=CONTENT_TYPE)


def invalid_value(detail: str) -> ScimError:
    return ScimError(400, detail, "invalidValue")


def not_found(detail: str = "No such resource.") -> ScimError:
    return ScimError(404, detail)
