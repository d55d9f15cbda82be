"""Every tenant API route, driven with out-of-range and malformed values, answers below 500,
and each error it answers is JSON in our error language.

The routes are read from the URL resolver (everything under /api/ and /admin/groups/), their
fields and query parameters from the OpenAPI schema: a route added later is driven here
without touching this file. Requests run in this process through Django's test client on the
real PostgreSQL test database, each example rolled back so none sees another's writes.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.api.errors import TENANT_API_PREFIXES
from accounts.models import Group
from byok.services import team_key_add
from core import errors
from tests.support.profiles import install_profiles
from tests.support.tenants import Tenant, make_tenant

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")
# Every code of our error language (core/errors.py's tree).
OUR_CODES = frozenset(errors.meanings())


@dataclass(frozen=True)
class Route:
    template: str  # "/api/groups/<int:group_id>"
    methods: tuple[str, ...]  # the ones its view answers

    @property
    def slots(self) -> list[tuple[str, str]]:
        """The (converter, name) of each path parameter, in order."""
        return re.findall(r"<(?:(\w+):)?(\w+)>", self.template)

    @property
    def schema_path(self) -> str:
        """The route as the OpenAPI schema names it: /api/groups/{group_id}."""
        return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", self.template)


def _walk(patterns, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern), entry


def tenant_routes() -> list[Route]:
    """Every route the URL resolver has under the tenant API's prefixes."""
    routes = []
    for template, entry in _walk(get_resolver().url_patterns):
        template = "/" + template
        if not template.startswith(TENANT_API_PREFIXES):
            continue
        view = getattr(entry.callback, "cls", None) or getattr(entry.callback, "view_class", None)
        methods = tuple(m for m in METHODS if view is None or hasattr(view, m))
        routes.append(Route(template=template, methods=methods or METHODS))
    return routes


ROUTES = tenant_routes()


@functools.cache
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def documented_fields(route: Route, method: str) -> tuple[list[str], list[str]]:
    """The (body fields, query parameters) the schema gives this route and method."""
    operation = schema()["paths"].get(route.schema_path, {}).get(method)
    if operation is None:
        return [], []
    query = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    body_schema = body.get("schema", {})
    if "$ref" in body_schema:
        name = body_schema["$ref"].rsplit("/", 1)[-1]
        body_schema = schema()["components"]["schemas"][name]
    return list(body_schema.get("properties", {})), query


# ---------------------------------------------------------------- hostile values

EDGE_INTEGERS = [
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    2**53 + 1,
    10**15,
    10**15 + 1,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
]
EDGE_TEXTS = [
    "",
    " ",
    "abc",
    "\x00",
    "a\x00b",
    "1.5",
    "1e3",
    "1e309",
    "-1",
    "0x10",
    "9" * 40,
    "null",
    "true",
    "２",  # a full-width digit
    "x" * 5000,
    "../../etc/passwd",
    "%00",
    "2026-13-45",
    "2026-02-30T25:61:00Z",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    "gAAAA",
    "cD1nYXJiYWdl",  # a forged cursor: base64 of "p=garbage"
    "bz0wJnI9MSZwPTIwMjYtMTMtNDU=",  # base64 of "o=0&r=1&p=2026-13-45"
    "stub-openai",
    "day",
    "month",
]
integers = st.sampled_from(EDGE_INTEGERS) | st.integers()
texts = st.sampled_from(EDGE_TEXTS) | st.text(max_size=30)
scalars = (
    st.none() | st.booleans() | integers | st.floats(allow_nan=False, allow_infinity=False) | texts
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
# Bodies that are not a JSON object, or not JSON at all.
BAD_BODIES = [
    b"",
    b"{",
    b'{"name": ',
    b"[1, 2",
    b"\xff\xfe\x00",
    b"NaN",
    b'{"budget_max_micro": Infinity}',
    b'{"rpm_limit": 1e999999}',
    b'{"rpm_limit": ' + b"9" * 5000 + b"}",
    b'{"name": "\\ud800"}',
    b"[]",
    b'"a string"',
    b"42",
    b"null",
]
CONTENT_TYPES = [
    "application/json",
    "application/json",
    "application/json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
]


@dataclass(frozen=True)
class World:
    """The objects a route's ids may name: the caller's own and another tenant's."""

    caller: Tenant
    other: Tenant
    team_key_id: int

    @property
    def own_ids(self) -> list[int]:
        return [
            self.caller.account_id,
            self.caller.group_id,
            self.caller.api_key_id,
            self.team_key_id,
        ]

    @property
    def ids(self) -> list[int]:
        return [*self.own_ids, self.other.account_id, self.other.group_id, self.other.api_key_id]


def path_value(converter: str, world: World) -> st.SearchStrategy[str]:
    """A path parameter: mostly one of the caller's ids (so the view runs past its lookup),
    else another tenant's, an out-of-range one, or something that is no id at all."""
    own = st.sampled_from(world.own_ids).map(str)
    hostile = (st.sampled_from(world.ids) | integers | texts).map(str)
    if converter == "int":
        return st.one_of(own, own, hostile)
    return hostile | st.sampled_from(["stub-openai", "0" * 32, "req-1"])


@st.composite
def requests(draw, route: Route, world: World) -> dict:
    """One request to `route`: a method (sometimes one it does not take), its path filled,
    query parameters and a body built from the schema's names and hostile values."""
    method = draw(st.sampled_from(route.methods) | st.sampled_from(METHODS))
    path = route.template
    for converter, name in route.slots:
        value = draw(path_value(converter or "str", world))
        path = re.sub(rf"<(?:\w+:)?{name}>", lambda _m, v=value: quote(v, safe=""), path)  # type: ignore[misc]  # mypy infers no lambda with a default
    body_fields, query_names = documented_fields(route, method)
    query = draw(
        st.dictionaries(
            st.sampled_from([*query_names, "limit", "offset", "cursor", "format"]),
            (values | st.sampled_from(world.ids)).map(
                lambda v: v if isinstance(v, str) else json.dumps(v)
            ),
            max_size=4,
        )
    )
    body: bytes = b""
    content_type = "application/json"
    if method != "get":
        names = st.sampled_from(body_fields) if body_fields else texts
        fields = st.dictionaries(names, values | st.sampled_from(world.ids), max_size=6)
        body = draw(
            fields.map(lambda d: json.dumps(d).encode())
            | values.map(lambda v: json.dumps(v).encode())
            | st.sampled_from(BAD_BODIES)
        )
        content_type = draw(st.sampled_from(CONTENT_TYPES))
    return {
        "method": method,
        "path": path + ("?" + urlencode(query) if query else ""),
        "body": body,
        "content_type": content_type,
        "authenticated": draw(st.booleans() | st.just(True)),
        "accept": draw(st.sampled_from(["application/json", "text/html", "*/*", "image/png"])),
    }


@contextmanager
def rolled_back() -> Iterator[None]:
    """Run one example in a savepoint that is rolled back: no example sees another's writes
    (nor a transaction a failed statement left aborted)."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


@pytest.fixture
def world() -> World:
    install_profiles("http://127.0.0.1:9")  # nothing listens there: no vendor is called
    caller, other = make_tenant(), make_tenant()
    team_key = team_key_add(
        group=Group.objects.get(pk=caller.group_id),
        provider="stub-openai",
        label="prod",
        key="sk-team-abcd",
    )
    return World(caller=caller, other=other, team_key_id=team_key.pk)


def send(client: Client, world: World, request: dict):
    headers = {"HTTP_ACCEPT": request["accept"]}
    if request["authenticated"]:
        headers["HTTP_AUTHORIZATION"] = f"Token {world.caller.api_token}"
    call = getattr(client, request["method"])
    if request["method"] == "get":
        return call(request["path"], **headers)
    return call(
        request["path"], data=request["body"], content_type=request["content_type"], **headers
    )


def assert_in_our_language(request: dict, response) -> None:
    said = f"{request['method'].upper()} {request['path'][:300]} -> {response.status_code}"
    assert response.status_code < 500, f"{said}: {response.content[:500]!r}"
    if response.status_code < 400:
        return
    assert response["Content-Type"] == "application/json", said
    error = json.loads(response.content)["error"]
    assert error["code"] in OUR_CODES, said
    assert isinstance(error["message"], str) and error["message"], said
    assert isinstance(error["type"], str) and error["type"], said


def test_the_routes_are_read_from_the_resolver():
    templates = {route.template for route in ROUTES}
    # The public surface DESIGN.md fixes; every route under the prefixes is driven, not only
    # these.
    assert {
        "/api/groups/<int:group_id>",
        "/api/keys",
        "/admin/groups/<int:group_id>/byok",
        "/admin/groups/<int:group_id>/byok/<str:provider>",
        "/admin/groups/<int:group_id>/byok/<str:provider>/keys",
        "/admin/groups/<int:group_id>/byok/keys/<int:key_id>",
    } <= templates
    assert all(t.startswith(TENANT_API_PREFIXES) for t in templates)


@pytest.mark.parametrize("route", ROUTES, ids=[r.template for r in ROUTES])
def test_every_route_answers_hostile_input_below_500_in_our_error_language(route, world):
    client = Client(raise_request_exception=False)

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(request=requests(route, world))
    def answers_in_our_language(request: dict) -> None:
        with rolled_back():
            response = send(client, world, request)
        assert_in_our_language(request, response)

    answers_in_our_language()
