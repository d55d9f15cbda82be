"""ASGI entry points: the data plane, the control plane, and both in one process.

- `gateway_application`, the data plane: `/v1/...`, `/internal/...`, `/healthz`, `/readyz`
  and `/metrics` on the gateway's lean app, without Django's request machinery; any other
  path answers a JSON 404 in the gateway's error language naming the base URLs.
- `control_application`, the control plane: Django (dashboard, Django admin, tenant API, API
  docs, static files), plus its own `/healthz`; a model route answers a JSON 404 naming the
  gateway's base URLs (config/model_routes.py). A password hash or an admin page run here
  takes no CPU from proxied requests.
- `application`, both behind one port: gateway paths to the gateway, the rest to Django
  (except a gateway route without its /v1, which an SDK given the bare host sends: a JSON
  404 naming the base URLs). For `make run`, one-process deployments and the scripts that
  start `config.asgi:application`.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402

from core import errors  # noqa: E402
from gateway.asgi import Exchange, base_urls, gateway_app, lacks_v1, no_route, serves  # noqa: E402
from gateway.runtime import runtime  # noqa: E402
from gateway.startup import prepare  # noqa: E402

django_app = get_asgi_application()


async def application(scope, receive, send):
    # Its own dispatch, not gateway_application's: a proxied request's path is tested once.
    kind = scope["type"]
    if kind == "http" and serves(scope["path"]):
        await gateway_app(scope, receive, send)
    elif kind == "http" and lacks_v1(scope["path"]):
        # An SDK pointed at the bare host: answered in its error language, not Django's page.
        ex = Exchange(scope, receive, send)
        await ex.refuse(errors.NotFound(no_route(ex)))
    elif kind == "lifespan":
        await lifespan(receive, send, start_gateway=True)
    else:
        await django_app(scope, receive, send)


async def gateway_application(scope, receive, send):
    kind = scope["type"]
    if kind == "http" and serves(scope["path"]):
        await gateway_app(scope, receive, send)
    elif kind == "lifespan":
        await lifespan(receive, send, start_gateway=True)
    elif kind == "http":
        ex = Exchange(scope, receive, send)
        message = no_route(ex) if lacks_v1(scope["path"]) else _wrong_plane(ex)
        await ex.refuse(errors.NotFound(message))


async def control_application(scope, receive, send):
    kind = scope["type"]
    if kind == "http" and scope["path"] == "/healthz":
        await Exchange(scope, receive, send).reply(200, b'{"status":"ok","plane":"control"}')
    elif kind == "lifespan":
        await lifespan(receive, send, start_gateway=False)
    else:
        await django_app(scope, receive, send)


def _wrong_plane(ex: Exchange) -> str:
    return (
        f"No route {ex.scope['method']} {ex.scope['path'][:200]} on the Tollgate gateway. "
        f"{base_urls(ex)} The dashboard, admin and tenant API are served by the control plane."
    )


async def lifespan(receive, send, *, start_gateway: bool) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await prepare()
                if start_gateway:
                    await runtime.start()
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                raise SystemExit(3) from exc
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if start_gateway:
                await runtime.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return
