"""The shapes SCIM reads answer: a User, a Group, a ListResponse; the response parameters
(attributes, excludedAttributes) and a page (startIndex, count)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from accounts.models import Account, Membership
from scim.errors import ScimError
from scim.models import ScimGroup, ScimUser
from scim.schemas import GROUP, LIST_RESPONSE, MAX_RESULTS, USER

ALWAYS = ("schemas", "id")


def iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def user_resource(user: Any, *, account: Account, base_url: str) -> dict:
    row = ScimUser.objects.filter(account=account, user=user).first()
    attrs = row.attributes if row else {}
    out: dict = {"schemas": [USER], "id": str(user.pk)}
    if row and row.external_id:
        out["externalId"] = row.external_id
    out["userName"] = user.username
    if "name" in attrs:
        out["name"] = attrs["name"]
    elif row is None and (user.first_name or user.last_name):
        out["name"] = {"givenName": user.first_name, "familyName": user.last_name}
    if "displayName" in attrs:
        out["displayName"] = attrs["displayName"]
    if "emails" in attrs:
        out["emails"] = attrs["emails"]
    elif row is None and user.email:
        out["emails"] = [{"value": user.email, "primary": True}]
    member = Membership.objects.filter(account=account, user=user).exists()
    if row is None or row.active is not None:
        # A member an owner removed (dashboard, tenant API) reads inactive until the
        # directory says active again.
        out["active"] = member and (row is None or bool(row.active))
    groups = ScimGroup.objects.filter(account=account, members=user).order_by("id")
    if groups:
        out["groups"] = [
            {"value": str(g.pk), "$ref": f"{base_url}/Groups/{g.pk}", "display": g.display_name}
            for g in groups
        ]
    created = row.created_at if row else user.date_joined
    out["meta"] = {
        "resourceType": "User",
        "created": iso(created),
        "lastModified": iso(row.updated_at if row else created),
        "location": f"{base_url}/Users/{user.pk}",
    }
    return out


def user_writable(resource: dict) -> dict:
    """The attributes a PATCH may change, as a read shows them."""
    keys = ("userName", "name", "displayName", "emails", "active", "externalId")
    return {k: resource.get(k) for k in keys}


def group_resource(group: ScimGroup, *, base_url: str) -> dict:
    out: dict = {"schemas": [GROUP], "id": str(group.pk), "displayName": group.display_name}
    if group.external_id:
        out["externalId"] = group.external_id
    ids = sorted(group.members.values_list("pk", flat=True))
    if ids:
        out["members"] = [{"value": str(i), "$ref": f"{base_url}/Users/{i}"} for i in ids]
    out["meta"] = {
        "resourceType": "Group",
        "created": iso(group.created_at),
        "lastModified": iso(group.updated_at),
        "location": f"{base_url}/Groups/{group.pk}",
    }
    return out


def group_writable(resource: dict) -> dict:
    return {k: resource.get(k) for k in ("displayName", "externalId", "members")}


def _names(raw: Any) -> set[str]:
    if raw is None:
        return set()
    if isinstance(raw, list):
        raw = ",".join(str(x) for x in raw)
    names = set()
    for part in str(raw).split(","):
        part = part.strip()
        if ":" in part:  # a schema URN before the attribute
            part = part.rsplit(":", 1)[1]
        if part:
            names.add(part.split(".", 1)[0].lower())
    return names


def project(resource: dict, *, attributes: Any = None, excluded: Any = None) -> dict:
    """Keep what `attributes` asks for, or drop what `excludedAttributes` names (top-level
    attributes; a sub-attribute keeps or drops its whole parent). id and schemas always stay."""
    wanted, dropped = _names(attributes), _names(excluded)
    if wanted:
        return {k: v for k, v in resource.items() if k in ALWAYS or k.lower() in wanted}
    if dropped:
        return {k: v for k, v in resource.items() if k in ALWAYS or k.lower() not in dropped}
    return resource


def page_bounds(start: Any, count: Any) -> tuple[int, int]:
    """startIndex (1-based, below 1 is 1) and count (negative is 0, above MAX_RESULTS is it)."""
    try:
        start_i = int(start) if start not in (None, "") else 1
        count_i = int(count) if count not in (None, "") else MAX_RESULTS
    except (TypeError, ValueError) as exc:
        raise ScimError(400, "startIndex and count are integers.", "invalidValue") from exc
    return max(start_i, 1), min(max(count_i, 0), MAX_RESULTS)


def list_response(rows: QuerySet, shape, *, start: int, count: int) -> dict:
    total = rows.count()
    page = list(rows[start - 1 : start - 1 + count]) if count else []
    resources = [shape(row) for row in page]
    return {
        "schemas": [LIST_RESPONSE],
        "totalResults": total,
        "startIndex": start,
        "itemsPerPage": len(resources),
        "Resources": resources,
    }
