"""Stub vendor server: fakes OpenAI, Anthropic and two web vendors for tests and benchmarks.

Start it with ``python manage.py runstub --host 127.0.0.1 --port 8765`` or,
without Django, ``python -m stubvendor.server --host 127.0.0.1 --port 8765``
(``--port 0`` picks a free port; the first stdout line is always
``stub listening on http://HOST:PORT``).  In-process (tests)::

    with StubServer() as stub:        # background thread, free port
        httpx.post(stub.url + "/v1/chat/completions", ...)

Everything below is deterministic; the official SDKs (openai, anthropic) parse
every answer, streamed or not, including their parse/stream helpers.

Vendor routes
-------------
* ``POST .../chat/completions`` (any prefix): OpenAI chat completions.
  Key: ``Authorization: Bearer <key>``.
* ``POST .../messages`` (any prefix): Anthropic messages.
  Key: ``x-api-key: <key>`` (``Authorization: Bearer <key>`` also accepted).
* ``POST .../messages/count_tokens`` (any prefix): Anthropic token counting,
  ``{"input_tokens": N}`` with N the prompt tokens a messages call with that
  body would report as ``input_tokens`` + both cache fields (tools, images,
  documents included).  Recorded, key-checked, JSON-object body and
  ``model`` required, and subject to faults like messages (status faults and
  ``hang`` as usual; the drop kinds close the connection without a response;
  ``slow`` waits ``delay_ms`` once).  No answer tokens; it neither reads nor
  writes the prompt caches.
* ``POST .../responses`` (any prefix): the OpenAI Responses API, answered by
  the rules below (tools, JSON, reasoning, words, prompt tokens, caching,
  faults) read from its own fields; the contract is in
  ``stubvendor/responses.py``'s docstring.  Key: ``Authorization: Bearer <key>``.
* ``POST .../embeddings`` (any prefix): OpenAI embeddings, deterministic
  vectors (``embeddings.embedding_vector``); the contract is in
  ``stubvendor/embeddings.py``'s docstring.  Key: ``Authorization: Bearer <key>``.
* ``POST .../moderations`` (any prefix): OpenAI moderations, deterministic
  verdicts (``moderations.moderation_result``: the words ``violent`` and
  ``hateful`` flag, ``rude`` scores without flagging); the contract is in
  ``stubvendor/moderations.py``'s docstring.  Key: ``Authorization: Bearer <key>``.
* Azure OpenAI (``stubvendor/azure.py``, whose docstring is the contract):
  ``POST .../openai/deployments/{deployment}/chat/completions`` and
  ``.../embeddings`` and ``POST .../openai/responses``, each with an
  ``api-version`` query parameter (without it: Azure's 404 ``{"error":
  {"code": "404", "message": "Resource not found"}}``), and ``POST
  .../openai/v1/chat/completions``, ``/responses``, ``/embeddings`` when signed
  with ``api-key`` (or given an ``api-version``; otherwise they are OpenAI's
  routes above).  Served by the OpenAI handlers here (answers, tokens,
  streaming, tools, faults); key ``api-key: <key>`` (missing/empty: 401 in
  Azure's shape); the deployment is the call's ``model``; the calls log adds
  ``api_version``.  Content filter: a body containing ``FILTERME`` answers
  Azure's 400 ``content_filter`` refusal; a chat body containing
  ``FILTERANSWER`` ends with ``finish_reason: "content_filter"``.
* AWS Bedrock (``stubvendor/bedrock.py``, whose docstring and the modules it names are the
  contract):
  ``POST .../model/{modelId}/converse`` and ``.../converse-stream`` (the
  stream in AWS event-stream framing), each checked for a SigV4 signature by
  the test credentials (``$STUB_AWS_CREDENTIALS``; 403 ``{"message"}`` when
  it does not match); the word and token rules here, Converse's fields and
  explicit ``cachePoint`` caching; faults as below, in Bedrock's error shape.
* ``GET .../models`` (any prefix): ``{"object": "list", "data": [{"id":
  "stub-model", "object": "model", "created": 0, "owned_by": "stub"}]}``.
  Key-checked like the others (OpenAI or Anthropic header), recorded in the
  calls log with ``model: null`` and subject to queued faults (so a fault with
  ``match.model`` is never consumed by it).  Errors use the Anthropic shape
  when the request carries ``x-api-key`` or ``anthropic-version``.
* ``POST .../v1beta/models/{model}:generateContent`` / ``:streamGenerateContent``
  (the Gemini API, key ``x-goog-api-key``), the same under ``.../v1/projects/{p}/
  locations/{l}/publishers/google/models/{model}`` (Vertex AI, a bearer token from
  ``POST /_stub/google/token``, the JWT-bearer grant), and ``POST
  /_stub/google/keys``: Google's shapes, errors and OAuth; the contract is in
  ``stubvendor/gemini.py``'s docstring and the modules it names.
* ``POST .../render`` and ``POST .../search`` (any prefix): the web vendors, a
  JavaScript renderer (the stub loads the page and applies its inner-HTML
  assignment scripts) and a search API (results recomputable from the
  query); recorded with ``shape: "web"`` and ``model: null``, key-checked,
  subject to faults, errors ``{"error": {"message", "type"}}``; the contract
  is in ``stubvendor/web.py``'s docstring.  Key: ``Authorization: Bearer <key>``.

Key check: a missing or empty key answers 401 in the vendor's error shape.  If
``STUB_ACCEPT_KEYS`` (comma separated) is set when the app is built, only those
keys are accepted (others: 401, message echoing the key); otherwise any
non-empty key is accepted.  The key check happens before faults: a rejected
call does not consume a queued fault.  A body that is not a JSON object, or a
missing/empty ``model``, answers 400 (the call is still recorded).  So do, also
before faults: a reasoning model's ``max_tokens`` and a too-large thinking
budget (see Answer), a ``tool_choice`` naming a tool that is not in a given
``tools``, and a non-integer ``x-stub-words`` header.

Every other request field (``seed``, ``temperature``, ``presence_penalty``,
``frequency_penalty``, ``logit_bias``, ``metadata``, ``top_k``,
``service_tier``, ``user``, ``store``, ...) is accepted, ignored, and visible in
the recorded body.

Where the rest of the contract is written
-----------------------------------------
Each module's docstring says what it owns:

* ``stubvendor/prompt.py``: prompt tokens and prompt caching.
* ``stubvendor/answers.py``: the answer (words, stop, max tokens, tool calls, JSON mode,
  thinking, reasoning, ``n``, logprobs) and output tokens; ``stubvendor/tools.py`` builds
  tool arguments from their schemas.
* ``stubvendor/rendering.py``: the OpenAI and Anthropic bodies, whole and streamed, and
  the error bodies.
* ``stubvendor/control.py``: the ``/_stub/...`` control routes (a contract other tools
  rely on).
* ``stubvendor/vendor.py``: the vendor routes' dispatch, key check and faults.
* ``stubvendor/state.py``: the calls log, fault queue and prompt caches one app holds;
  ``stubvendor/wire.py``: the vendors' error shapes and keys.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from collections.abc import Iterable
from typing import Any, Self

from aiohttp import web

from stubvendor.control import delete_calls, get_calls, get_faults, health, post_faults
from stubvendor.state import INBOUND_TRACEPARENT, STATE, StubState
from stubvendor.vendor import vendor

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


@web.middleware
async def trace_context(request: web.Request, handler: Any) -> web.StreamResponse:
    INBOUND_TRACEPARENT.set(request.headers.get("traceparent"))
    return await handler(request)


def _accept_keys_from_env() -> frozenset[str] | None:
    raw = os.environ.get("STUB_ACCEPT_KEYS", "")
    keys = frozenset(k.strip() for k in raw.split(",") if k.strip())
    return keys or None


def make_app(accept_keys: Iterable[str] | None = None) -> web.Application:
    """Build the stub app.  ``accept_keys`` defaults to ``$STUB_ACCEPT_KEYS``."""
    from stubvendor.site import site_page  # the demo's pages (stubvendor/site.py)

    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[trace_context])
    keys = frozenset(accept_keys) if accept_keys is not None else _accept_keys_from_env()
    app[STATE] = StubState(keys)
    app.router.add_post("/_stub/faults", post_faults)
    app.router.add_get("/_stub/faults", get_faults)
    app.router.add_get("/_stub/calls", get_calls)
    app.router.add_delete("/_stub/calls", delete_calls)
    app.router.add_get("/_stub/health", health)
    app.router.add_get("/_stub/site/{tail:.*}", site_page)
    app.router.add_route("*", "/{tail:.*}", vendor)
    return app


async def start_site(
    app: web.Application, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
) -> tuple[web.AppRunner, int]:
    """Start ``app`` on host:port (0 = any free port); return (runner, bound port)."""
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
    await site.start()
    return runner, runner.addresses[0][1]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve the stub in the foreground until interrupted (SIGINT / SIGTERM)."""
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    runner, bound = loop.run_until_complete(start_site(make_app(), host, port))
    print(f"stub listening on http://{host}:{bound}", flush=True)
    try:
        loop.add_signal_handler(signal.SIGTERM, loop.stop)
    except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
        pass
    try:
        loop.run_forever()
    except KeyboardInterrupt:
        pass
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()


class StubServer:
    """Run the stub in a background thread (for tests): ``with StubServer() as s: s.url``."""

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = 0,
        accept_keys: Iterable[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.app = make_app(accept_keys)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def state(self) -> StubState:
        return self.app[STATE]

    def _serve(self) -> None:
        loop = self._loop = _new_loop()
        asyncio.set_event_loop(loop)
        try:
            runner, self.port = loop.run_until_complete(start_site(self.app, self.host, self.port))
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._serve, name="stub-server", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Stub OpenAI/Anthropic vendor server.")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    run(args.host, args.port)


if __name__ == "__main__":
    # Under ``python -m`` this file runs as ``__main__``, a second copy of the module;
    # serve the one everything else imports, ``stubvendor.server``.
    from stubvendor.server import main as _main

    _main(sys.argv[1:])
