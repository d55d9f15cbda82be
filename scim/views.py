"""/scim/v2/: the SCIM 2.0 protocol (RFC 7644) over the account of the bearer token.

Thin views: read the request, call a service (scim/users.py, scim/groups.py), answer the
resource. Every answer is application/scim+json; every refusal SCIM's error schema
(scim/errors.py), a database outage included (503).
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable
from typing import Any

import orjson
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from accounts.api.errors import OUTAGES
from scim import groups, patch, resources, schemas, users
from scim.auth import Caller, authenticate
from scim.errors import ScimError, invalid_value, not_found, scim_response
from scim.models import ScimGroup

log = logging.getLogger(__name__)

USER_KNOWN = {
    k.lower(): k for k in ("userName", "name", "displayName", "emails", "active", "externalId")
}
GROUP_KNOWN = {k.lower(): k for k in ("displayName", "externalId", "members")}


def scim_view(*methods: str, public: bool = False) -> Callable:
    """Answer `methods` (else 405), authenticate (unless public) and turn every refusal into
    SCIM's error body."""

    def decorate(view: Callable) -> Callable:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                if request.method not in methods:
                    raise ScimError(405, f"{request.method} is not supported here.")
                caller = None if public else authenticate(request)
                return view(request, caller, *args, **kwargs)
            except ScimError as exc:
                return exc.response()
            except RequestDataTooBig:
                return ScimError(413, "The request body is too large.").response()
            except OUTAGES as exc:
                log.warning("SCIM: a dependency is down (%s): answering 503", type(exc).__name__)
                response = ScimError(503, "A dependency is down; try again shortly.").response()
                response["Retry-After"] = "5"
                return response
            except Exception:
                # A bug: logged with its traceback, answered in SCIM's format all the same.
                log.exception("SCIM: %s %s failed", request.method, request.path)
                return ScimError(500, "Internal error.").response()

        return wrapper

    return decorate


def base_url(request: HttpRequest) -> str:
    return request.build_absolute_uri("/scim/v2")


def body(request: HttpRequest) -> Any:
    try:
        return orjson.loads(request.body or b"{}")
    except orjson.JSONDecodeError as exc:
        raise ScimError(400, "The body is not JSON.", "invalidSyntax") from exc


def _id(raw: str) -> int:
    if not raw.isdigit() or len(raw) > 18:
        raise not_found()
    return int(raw)


# ---------------------------------------------------------------- discovery


@scim_view("GET", public=True)
def service_provider_config(request: HttpRequest, caller: None) -> HttpResponse:
    return scim_response(schemas.service_provider_config(base_url(request)))


def _listed(items: list[dict]) -> dict:
    return {
        "schemas": [schemas.LIST_RESPONSE],
        "totalResults": len(items),
        "startIndex": 1,
        "itemsPerPage": len(items),
        "Resources": items,
    }


@scim_view("GET", public=True)
def resource_types(request: HttpRequest, caller: None, name: str | None = None) -> HttpResponse:
    items = schemas.resource_types(base_url(request))
    if name is None:
        return scim_response(_listed(items))
    found = [item for item in items if item["id"] == name]
    if not found:
        raise not_found(f"No resource type {name!r}.")
    return scim_response(found[0])


@scim_view("GET", public=True)
def schema_list(request: HttpRequest, caller: None, urn: str | None = None) -> HttpResponse:
    items = schemas.schemas(base_url(request))
    if urn is None:
        return scim_response(_listed(items))
    found = [item for item in items if item["id"] == urn]
    if not found:
        raise not_found(f"No schema {urn!r}.")
    return scim_response(found[0])


@scim_view("GET", "POST", "PUT", "PATCH", "DELETE", public=True)
def unknown(request: HttpRequest, caller: None, rest: str = "") -> HttpResponse:
    raise not_found(f"No SCIM endpoint /{rest}.")


@scim_view("POST")
def root_search(request: HttpRequest, caller: Caller) -> HttpResponse:
    """Search Users and Groups at once (RFC 7644 §3.4.3): Users first, then Groups, one page
    over both; a filter applies to each type that has its attribute."""
    params = _params(request, search=True)
    start, count = resources.page_bounds(params["startIndex"], params["count"])
    url = base_url(request)
    kinds = []
    for group, lookups, rows in (
        (False, USER_FILTERS, users.users_of_account(caller.account)),
        (True, GROUP_FILTERS, ScimGroup.objects.filter(account=caller.account).order_by("id")),
    ):
        try:
            kinds.append(
                (group, _filtered(rows, params["filter"], lookups, caller, users_of=not group))
            )
        except ScimError as exc:
            if exc.scim_type != "invalidFilter" or "not supported" not in exc.detail:
                raise
            kinds.append((group, rows.none()))  # the attribute is not this type's
    total = sum(rows.count() for _, rows in kinds)
    found: list[dict] = []
    skip = start - 1
    for group, rows in kinds:
        size = rows.count()
        if skip >= size:
            skip -= size
            continue
        for row in rows[skip : skip + count - len(found)]:
            shape = (
                resources.group_resource(row, base_url=url)
                if group
                else resources.user_resource(row, account=caller.account, base_url=url)
            )
            found.append(
                resources.project(
                    shape, attributes=params["attributes"], excluded=params["excludedAttributes"]
                )
            )
        skip = 0
    body_out = {
        "schemas": [schemas.LIST_RESPONSE],
        "totalResults": total,
        "startIndex": start,
        "itemsPerPage": len(found),
        "Resources": found,
    }
    return scim_response(body_out)


# ---------------------------------------------------------------- queries


def _params(request: HttpRequest, *, search: bool) -> dict:
    if not search:
        return {k: request.GET.get(k) for k in ("filter", "startIndex", "count")} | {
            "attributes": request.GET.get("attributes"),
            "excludedAttributes": request.GET.get("excludedAttributes"),
        }
    data = body(request)
    if not isinstance(data, dict):
        raise invalid_value("A SearchRequest is a JSON object.")
    return {
        k: data.get(k)
        for k in ("filter", "startIndex", "count", "attributes", "excludedAttributes")
    }


USER_FILTERS = {"username": "username__iexact", "id": "pk", "emails.value": "email__iexact"}
GROUP_FILTERS = {"displayname": "display_name__iexact", "id": "pk"}


def _filtered(rows, raw: Any, lookups: dict[str, str], caller: Caller, *, users_of: bool):
    if not raw:
        return rows
    if not isinstance(raw, str):
        raise ScimError(400, "filter is a string.", "invalidFilter")
    name, value = patch.parse_eq(raw)
    name = name.lower().rsplit(":", 1)[-1] if ":" in name else name.lower()
    if name == "externalid":
        if users_of:
            return rows.filter(
                scim_users__account=caller.account, scim_users__external_id=str(value)
            )
        return rows.filter(external_id=str(value))
    if name not in lookups:
        raise ScimError(400, f"Filtering on {name!r} is not supported.", "invalidFilter")
    if name == "id" and not str(value).isdigit():
        return rows.none()
    return rows.filter(**{lookups[name]: str(value)})


def _query(request: HttpRequest, caller: Caller, *, group: bool, search: bool) -> HttpResponse:
    params = _params(request, search=search)
    start, count = resources.page_bounds(params["startIndex"], params["count"])
    url = base_url(request)
    if group:
        rows = ScimGroup.objects.filter(account=caller.account).order_by("id")
        rows = _filtered(rows, params["filter"], GROUP_FILTERS, caller, users_of=False)

        def shape(row):
            return resources.group_resource(row, base_url=url)
    else:
        rows = users.users_of_account(caller.account)
        rows = _filtered(rows, params["filter"], USER_FILTERS, caller, users_of=True)

        def shape(row):
            return resources.user_resource(row, account=caller.account, base_url=url)

    def projected(row):
        return resources.project(
            shape(row), attributes=params["attributes"], excluded=params["excludedAttributes"]
        )

    return scim_response(resources.list_response(rows, projected, start=start, count=count))


# ---------------------------------------------------------------- Users


def _user(caller: Caller, user_id: str):
    user = users.users_of_account(caller.account).filter(pk=_id(user_id)).first()
    if user is None:
        raise not_found(f"No User {user_id} here.")
    return user


def _answer(request, resource: dict, *, status: int = 200) -> HttpResponse:
    """A resource as the request's attributes ask, with its Location when created."""
    response = scim_response(
        resources.project(
            resource,
            attributes=request.GET.get("attributes"),
            excluded=request.GET.get("excludedAttributes"),
        ),
        status=status,
    )
    if status == 201:
        response["Location"] = resource["meta"]["location"]
    return response


def _user_answer(request, caller: Caller, user, *, status: int = 200) -> HttpResponse:
    resource = resources.user_resource(user, account=caller.account, base_url=base_url(request))
    return _answer(request, resource, status=status)


@scim_view("GET", "POST")
def user_list(request: HttpRequest, caller: Caller) -> HttpResponse:
    if request.method == "POST":
        data = users.clean(body(request))
        user = users.user_create(account=caller.account, data=data, actor=caller.actor)
        return _user_answer(request, caller, user, status=201)
    return _query(request, caller, group=False, search=False)


@scim_view("POST")
def user_search(request: HttpRequest, caller: Caller) -> HttpResponse:
    return _query(request, caller, group=False, search=True)


@scim_view("GET", "PUT", "PATCH", "DELETE")
def user_detail(request: HttpRequest, caller: Caller, user_id: str) -> HttpResponse:
    user = _user(caller, user_id)
    if request.method == "GET":
        return _user_answer(request, caller, user)
    if request.method == "DELETE":
        users.user_delete(account=caller.account, user=user, actor=caller.actor)
        return HttpResponse(status=204)
    # A PATCH reads, changes and writes the resource: with the row locked, so directories'
    # concurrent PATCHes of one resource each apply to the other's result.
    with transaction.atomic():
        user = type(user).objects.select_for_update().get(pk=user.pk)
        if request.method == "PUT":
            data = users.clean(body(request))
        else:
            current = resources.user_resource(user, account=caller.account, base_url="")
            data = users.clean(_patched(resources.user_writable(current), request, USER_KNOWN))
        users.user_replace(account=caller.account, user=user, data=data, actor=caller.actor)
    user.refresh_from_db()
    return _user_answer(request, caller, user)


def _patched(writable: dict, request: HttpRequest, known: dict[str, str], **kwargs) -> dict:
    operation = body(request)
    if not isinstance(operation, dict):
        raise invalid_value("A PatchOp is a JSON object.")
    operations = {k.lower(): v for k, v in operation.items()}.get("operations")
    urns = (schemas.USER, schemas.GROUP)
    multi = {"emails", "members"}
    return patch.apply(
        copy.deepcopy(writable), operations, known=known, multi=multi, urns=urns, **kwargs
    )


# ---------------------------------------------------------------- Groups


def _group(caller: Caller, group_id: str) -> ScimGroup:
    group = ScimGroup.objects.filter(account=caller.account, pk=_id(group_id)).first()
    if group is None:
        raise not_found(f"No Group {group_id} here.")
    return group


def _group_answer(request, group: ScimGroup, *, status: int = 200) -> HttpResponse:
    return _answer(
        request, resources.group_resource(group, base_url=base_url(request)), status=status
    )


@scim_view("GET", "POST")
def group_list(request: HttpRequest, caller: Caller) -> HttpResponse:
    if request.method == "POST":
        data = groups.clean(body(request), account=caller.account)
        group = groups.group_create(account=caller.account, data=data, actor=caller.actor)
        return _group_answer(request, group, status=201)
    return _query(request, caller, group=True, search=False)


@scim_view("POST")
def group_search(request: HttpRequest, caller: Caller) -> HttpResponse:
    return _query(request, caller, group=True, search=True)


@scim_view("GET", "PUT", "PATCH", "DELETE")
def group_detail(request: HttpRequest, caller: Caller, group_id: str) -> HttpResponse:
    group = _group(caller, group_id)
    if request.method == "GET":
        return _group_answer(request, group)
    if request.method == "DELETE":
        groups.group_delete(group=group, actor=caller.actor)
        return HttpResponse(status=204)
    with transaction.atomic():  # locked, as a User's (Okta sends a group's PATCHes at once)
        group = ScimGroup.objects.select_for_update().get(pk=group.pk)
        if request.method == "PUT":
            raw = body(request)
        else:
            current = resources.group_writable(resources.group_resource(group, base_url=""))
            raw = _patched(current, request, GROUP_KNOWN, key_of={"members": "value"})
        data = groups.clean(raw, account=caller.account)
        group = groups.group_replace(group=group, data=data, actor=caller.actor)
    return _group_answer(request, group)
