"""The control plane's answer to a model request: JSON in the gateway's error language
(LM-2004) naming the base URLs, never Django's HTML 404.

A model request reaches the control plane when a client is pointed at its address, or at a
proxy that sends the path here; a base URL without /v1 makes the SDKs send `/chat/...`,
`/messages`, `/embeddings`, `/moderations`, `/responses`, `/models`. Every path whose first
segment is one of the gateway's (its routes with and without their /v1) is answered here.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

from core import errors
from gateway.asgi import GATEWAY_PATHS, GATEWAY_PREFIXES, sdk_base_urls

# "v1", "internal", "metrics", ..., and what follows /v1: "chat", "messages", "models", ...
ROOTS = sorted(
    {path.split("/")[1] for path in (*GATEWAY_PATHS, *GATEWAY_PREFIXES)}
    | {path.split("/")[2] for path in GATEWAY_PATHS if path.startswith("/v1/")}
)


@csrf_exempt
def model_route_here(request: HttpRequest) -> HttpResponse:
    # The operator's public address when set (a proxy in front serves both planes there),
    # else the address this request came to.
    origin = settings.PUBLIC_URL or f"{request.scheme}://{request.get_host()}"
    message = (
        f"No route {request.method} {request.path[:200]} here: this is Tollgate's control "
        f"plane (dashboard, admin, tenant API); model requests go to its gateway. "
        f"{sdk_base_urls(origin)}"
    )
    error = errors.NotFound(message)
    return HttpResponse(error.body(), status=error.status, content_type="application/json")


urlpatterns = [re_path(rf"^(?:{'|'.join(ROOTS)})(?:/|$)", model_route_here)]
