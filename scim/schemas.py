"""What this SCIM service provider says of itself: ServiceProviderConfig, ResourceTypes and
Schemas (RFC 7643 §5-7). Only the attributes Tollgate stores are listed, so a client (and the
scim2-tester checks) never writes an attribute that a read would not give back."""

from __future__ import annotations

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST_RESPONSE = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
SEARCH_REQUEST = "urn:ietf:params:scim:api:messages:2.0:SearchRequest"
SPC = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"
RESOURCE_TYPE = "urn:ietf:params:scim:schemas:core:2.0:ResourceType"
SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Schema"
MAX_RESULTS = 200  # a page's most resources (count above it is lowered to it)


def attribute(
    name: str,
    type_: str = "string",
    *,
    multi: bool = False,
    required: bool = False,
    mutability: str = "readWrite",
    returned: str = "default",
    uniqueness: str = "none",
    case_exact: bool = False,
    sub: list[dict] | None = None,
    canonical: list[str] | None = None,
    references: list[str] | None = None,
    description: str = "",
) -> dict:
    out = {
        "name": name,
        "type": type_,
        "multiValued": multi,
        "description": description or name,
        "required": required,
        "caseExact": case_exact,
        "mutability": mutability,
        "returned": returned,
        "uniqueness": uniqueness,
    }
    if sub is not None:
        out["subAttributes"] = sub
    if canonical is not None:
        out["canonicalValues"] = canonical
    if references is not None:
        out["referenceTypes"] = references
    return out


USER_ATTRIBUTES = [
    attribute(
        "userName",
        required=True,
        uniqueness="server",
        description="The sign-in name: unique across Tollgate, compared without case.",
    ),
    attribute(
        "name",
        "complex",
        sub=[
            attribute("formatted"),
            attribute("familyName"),
            attribute("givenName"),
        ],
    ),
    attribute("displayName"),
    attribute(
        "emails",
        "complex",
        multi=True,
        sub=[
            attribute("value"),
            attribute("type", canonical=["work", "home", "other"]),
            attribute("primary", "boolean"),
        ],
        description="The primary (else the first) becomes the person's email.",
    ),
    attribute(
        "active",
        "boolean",
        description="false: the person's membership, sessions and tenant API tokens end.",
    ),
    attribute(
        "groups",
        "complex",
        multi=True,
        mutability="readOnly",
        sub=[
            attribute("value", mutability="readOnly"),
            attribute("$ref", "reference", mutability="readOnly", references=["Group"]),
            attribute("display", mutability="readOnly"),
        ],
        description="The account's SCIM Groups the person is in (change them on the Group).",
    ),
]

GROUP_ATTRIBUTES = [
    attribute(
        "displayName",
        required=True,
        uniqueness="server",
        description="The name Account.directory_roles maps to a role.",
    ),
    attribute(
        "members",
        "complex",
        multi=True,
        sub=[
            attribute("value", mutability="immutable"),
            attribute("$ref", "reference", mutability="immutable", references=["User"]),
        ],
    ),
]


def _schema(urn: str, name: str, attributes: list[dict], base_url: str) -> dict:
    return {
        "schemas": [SCHEMA],
        "id": urn,
        "name": name,
        "description": f"{name} resources",
        "attributes": attributes,
        "meta": {"resourceType": "Schema", "location": f"{base_url}/Schemas/{urn}"},
    }


def schemas(base_url: str) -> list[dict]:
    return [
        _schema(USER, "User", USER_ATTRIBUTES, base_url),
        _schema(GROUP, "Group", GROUP_ATTRIBUTES, base_url),
    ]


def resource_types(base_url: str) -> list[dict]:
    return [
        {
            "schemas": [RESOURCE_TYPE],
            "id": name,
            "name": name,
            "endpoint": endpoint,
            "description": f"The account's {endpoint[1:]}",
            "schema": urn,
            "schemaExtensions": [],
            "meta": {
                "resourceType": "ResourceType",
                "location": f"{base_url}/ResourceTypes/{name}",
            },
        }
        for name, endpoint, urn in (("User", "/Users", USER), ("Group", "/Groups", GROUP))
    ]


def service_provider_config(base_url: str) -> dict:
    return {
        "schemas": [SPC],
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": False},
        "sort": {"supported": False},
        "etag": {"supported": False},
        "authenticationSchemes": [
            {
                "type": "oauthbearertoken",
                "name": "Bearer token",
                "description": "The account's SCIM token (dashboard, Members page).",
                "primary": True,
            }
        ],
        "meta": {
            "resourceType": "ServiceProviderConfig",
            "location": f"{base_url}/ServiceProviderConfig",
        },
    }
