"""The documented nginx block (docs/production.md) and the control plane's URL conf agree:
every path the control plane serves is sent to it, every gateway path (with or without its
/v1) to the gateway; and what the control plane answers on a model path. Run for real through
nginx in tests/deploy/test_reverse_proxy.py."""

from __future__ import annotations

import re

import orjson
import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from config.model_routes import ROOTS, model_route_here
from gateway.asgi import GATEWAY_PATHS
from tests.support.nginx import control_location, documented_block

CONTROL = control_location(documented_block())


REFUSED = set(re.findall(r"location = (\S+) \{[^}]*return 404;", documented_block()))


def proxied_to(path: str) -> str:
    """Which upstream the documented block sends `path` to (or "refused": nginx's 404)."""
    if path in REFUSED:
        return "refused"
    return "control" if path == "/" or CONTROL.match(path) else "gateway"


def control_paths() -> list[str]:
    """One path for each of the control plane's routes: its literal start, `x` for a part."""
    paths = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            here = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, here)
            elif isinstance(pattern, URLPattern) and pattern.callback is not model_route_here:
                paths.append("/" + re.sub(r"<[^>]+>", "x", here).removeprefix("^"))

    walk(get_resolver().url_patterns, "")
    return paths


def test_the_proxy_sends_each_control_route_to_the_control_plane():
    paths = control_paths()
    assert {"/", "/login/", "/dashboard/", "/api/account", "/django-admin/"} <= set(paths)
    assert [p for p in paths if proxied_to(p) != "control"] == []
    assert (
        proxied_to("/" + settings.STATIC_URL.lstrip("/") + "dashboard/dashboard.css") == "control"
    )


def test_the_proxy_sends_every_gateway_path_with_or_without_v1_to_the_gateway():
    model_paths = [*GATEWAY_PATHS, *(p.removeprefix("/v1") for p in GATEWAY_PATHS)]
    assert "/chat/completions" in model_paths and "/messages" in model_paths
    # Every one but the metrics, which stay off the public side.
    assert {p: proxied_to(p) for p in model_paths if proxied_to(p) != "gateway"} == {
        "/metrics": "refused"
    }
    assert [r for r in ROOTS if proxied_to(f"/{r}/anything") != "gateway"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",
        "/chat/completions",
        "/chat/other",
        "/messages",
        "/embeddings",
        "/moderations",
        "/responses/resp_1",
        "/models",
        "/models/gpt-4o",
        "/internal/stream",
    ],
)
def test_the_control_plane_answers_a_model_path_with_json_naming_the_base_urls(path, settings):
    settings.PUBLIC_URL = ""  # the address the request came to, when none is set

    answer = Client().post(path, b"{}", content_type="application/json", HTTP_HOST="cp.test:8443")

    assert (answer.status_code, answer["content-type"]) == (404, "application/json")
    assert orjson.loads(answer.content) == {
        "error": {
            "message": f"No route POST {path} here: this is Tollgate's control plane (dashboard,"
            " admin, tenant API); model requests go to its gateway. Point the OpenAI SDK at base"
            " URL http://cp.test:8443/v1 and the Anthropic SDK at http://cp.test:8443 (it adds"
            " /v1 itself); the models are listed at GET /v1/models.",
            "type": "invalid_request_error",
            "code": "LM-2004",
        }
    }


def test_the_public_url_is_named_when_set(settings):
    settings.PUBLIC_URL = "https://tollgate.example.com"

    answer = Client().get("/models", HTTP_HOST="10.0.0.5:8001")

    assert (
        "base URL https://tollgate.example.com/v1 and"
        in orjson.loads(answer.content)["error"]["message"]
    )
    # A path that only starts like a model root is the control plane's own 404.
    assert Client().get("/modelsx").status_code == 404
