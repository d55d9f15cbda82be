"""ASGI entry point: the gateway's lean app for the proxy hot path, Django for the rest.

`/v1/...`, `/internal/...`, `/healthz`, `/readyz` and `/metrics` go to gateway.asgi without
touching Django's request machinery; everything else (admin, tenant API) goes to Django.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402

from gateway.asgi import gateway_app, serves  # noqa: E402
from gateway.runtime import runtime  # noqa: E402
from gateway.startup import prepare  # noqa: E402

django_app = get_asgi_application()


async def application(scope, receive, send):
    kind = scope["type"]
    if kind == "http" and serves(scope["path"]):
        await gateway_app(scope, receive, send)
    elif kind == "lifespan":
        await lifespan(receive, send)
    else:
        await django_app(scope, receive, send)


async def lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await prepare()
                await runtime.start()
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                raise SystemExit(3) from exc
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await runtime.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return
