"""The stub's web vendors (stubvendor/web.py): the renderer and the search API."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from stubvendor import web as stub_web
from stubvendor.server import StubServer

RENDER = "/web/v1/render"
SEARCH = "/web/v1/search"
AUTH = {"Authorization": "Bearer wk-1"}

# The page's scripts: two assignments (double and single quotes, spaced out), then scripts
# that must stay: unrelated, a single-quoted literal (not JSON), a second statement, a
# missing id.  The inserted HTML carries an assignment of its own, which must not run
# (``<\/script>`` inside the literal, as pages write it, so the outer script does not end).
APP_PAGE = (
    "<!DOCTYPE html><html><head><title>Demo</title></head><body>"
    '<div id="app">Loading</div><section id="news"></section><p id="late">old</p>'
    '<script>document.getElementById("app").innerHTML = '
    '"<h1>Rendered</h1><p>By the \\"stub\\" &amp; co. \\u00e9</p>";</script>'
    "<script>\n  document . getElementById( 'news' ) . innerHTML=\"<p>Fresh</p>"
    '<script>document.getElementById(\\"late\\").innerHTML = \\"new\\";<\\/script>" ;\n</script>'
    '<script>console.log("unrelated");</script>'
    "<script>document.getElementById(\"app\").innerHTML = '<p>single</p>';</script>"
    '<script>document.getElementById("app").innerHTML = "<p>two</p>"; go();</script>'
    '<script>document.getElementById("nowhere").innerHTML = "<p>lost</p>";</script>'
    "</body></html>"
)
APP_RENDERED = (
    "<!DOCTYPE html><html><head><title>Demo</title></head><body>"
    '<div id="app"><h1>Rendered</h1><p>By the "stub" &amp; co. \u00e9</p></div>'
    '<section id="news"><p>Fresh</p>'
    '<script>document.getElementById("late").innerHTML = "new";</script></section>'
    '<p id="late">old</p>'
    '<script>console.log("unrelated");</script>'
    "<script>document.getElementById(\"app\").innerHTML = '<p>single</p>';</script>"
    '<script>document.getElementById("app").innerHTML = "<p>two</p>"; go();</script>'
    '<script>document.getElementById("nowhere").innerHTML = "<p>lost</p>";</script>'
    "</body></html>"
)
MISSING_PAGE = "<html><head></head><body><h1>Not here</h1></body></html>"


# --------------------------------------------------------------------------- the page server


async def _app_page(request: web.Request) -> web.Response:
    return web.Response(text=APP_PAGE, content_type="text/html")


async def _redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/hop")


async def _hop(request: web.Request) -> web.Response:
    raise web.HTTPFound("/app")


async def _missing(request: web.Request) -> web.Response:
    return web.Response(status=404, text=MISSING_PAGE, content_type="text/html")


async def _latin1(request: web.Request) -> web.Response:
    body = "<p>caf\u00e9</p>".encode("iso-8859-1")
    return web.Response(body=body, headers={"Content-Type": "text/html; charset=iso-8859-1"})


async def _plain(request: web.Request) -> web.Response:
    return web.Response(text="a < b", content_type="text/plain")


async def _big(request: web.Request) -> web.Response:
    return web.Response(body=b"x" * (stub_web.MAX_PAGE_BYTES + 1), content_type="text/html")


async def _at_limit(request: web.Request) -> web.Response:
    return web.Response(body=b"x" * stub_web.MAX_PAGE_BYTES, content_type="text/html")


async def _stalled(request: web.Request) -> web.Response:
    await asyncio.sleep(30)  # cancelled when the stub gives up and disconnects
    return web.Response(text="too late")


def _page_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/app", _app_page)
    app.router.add_get("/redirect", _redirect)
    app.router.add_get("/hop", _hop)
    app.router.add_get("/missing", _missing)
    app.router.add_get("/latin1", _latin1)
    app.router.add_get("/plain", _plain)
    app.router.add_get("/big", _big)
    app.router.add_get("/at-limit", _at_limit)
    app.router.add_get("/stalled", _stalled)
    return app


@pytest.fixture(scope="module")
def pages() -> Iterator[str]:
    """The base URL of a page server: StubServer's thread and loop, serving our own app."""
    server = StubServer()
    server.app = _page_app()
    with server:
        yield server.url


@pytest.fixture()
def refused_url() -> Iterator[str]:
    """A URL whose port is bound but not listening: connecting is refused, every time."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"


def queue(client: httpx.Client, *faults: dict[str, Any]) -> None:
    assert client.post("/_stub/faults", json={"faults": list(faults)}).status_code == 200


def calls(client: httpx.Client) -> list[dict[str, Any]]:
    return client.get("/_stub/calls").json()["calls"]


def queued(client: httpx.Client) -> list[dict[str, Any]]:
    return client.get("/_stub/faults").json()["faults"]


def error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


# --------------------------------------------------------------------------- render


def test_render_applies_the_assignments_and_leaves_every_other_script(
    client: httpx.Client, pages: str
) -> None:
    r = client.post(RENDER, json={"url": pages + "/app", "wait_ms": 500}, headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {
        "url": pages + "/app",
        "final_url": pages + "/app",
        "status": 200,
        "content_type": "text/html",
        "html": APP_RENDERED,
        "rendered": True,
        "credits": 1,
    }


def test_render_follows_redirects_and_reports_the_final_url(
    client: httpx.Client, pages: str
) -> None:
    answer = client.post(RENDER, json={"url": pages + "/redirect"}, headers=AUTH).json()
    assert (answer["url"], answer["final_url"]) == (pages + "/redirect", pages + "/app")
    assert (answer["status"], answer["html"]) == (200, APP_RENDERED)


def test_render_told_not_to_follow_answers_the_redirect_unrendered(
    client: httpx.Client, pages: str
) -> None:
    body = {"url": pages + "/redirect", "follow_redirects": False}
    answer = client.post(RENDER, json=body, headers=AUTH).json()
    assert answer == {
        "url": pages + "/redirect",
        "final_url": pages + "/redirect",
        "status": 302,
        "content_type": "text/plain",
        "location": pages + "/hop",
        "html": "",
        "rendered": False,
        "credits": 1,
    }
    page = {"url": pages + "/app", "follow_redirects": False}
    assert client.post(RENDER, json=page, headers=AUTH).json()["html"] == APP_RENDERED


def test_render_refuses_a_follow_redirects_that_is_not_a_bool(
    client: httpx.Client, pages: str
) -> None:
    body = {"url": pages + "/redirect", "follow_redirects": "no"}
    r = client.post(RENDER, json=body, headers=AUTH)
    assert (r.status_code, r.json()) == (
        400,
        error("follow_redirects: true or false is required.", "invalid_request_error"),
    )


def test_render_passes_the_pages_404_through(client: httpx.Client, pages: str) -> None:
    r = client.post(RENDER, json={"url": pages + "/missing"}, headers=AUTH)
    assert r.status_code == 200
    assert (r.json()["status"], r.json()["html"]) == (404, MISSING_PAGE)


def test_render_decodes_by_the_charset_and_renders_any_type_as_html(
    client: httpx.Client, pages: str
) -> None:
    latin1 = client.post(RENDER, json={"url": pages + "/latin1"}, headers=AUTH).json()
    assert (latin1["content_type"], latin1["html"]) == (
        "text/html",
        "<html><head></head><body><p>caf\u00e9</p></body></html>",
    )
    plain = client.post(RENDER, json={"url": pages + "/plain"}, headers=AUTH).json()
    assert (plain["content_type"], plain["html"]) == (
        "text/plain",
        "<html><head></head><body>a &lt; b</body></html>",
    )


def test_render_of_an_unreachable_page_answers_502(client: httpx.Client, refused_url: str) -> None:
    r = client.post(RENDER, json={"url": refused_url}, headers=AUTH)
    assert r.status_code == 502
    assert r.json() == error("could not load the page", "upstream_error")
    assert [(c["path"], c["status"]) for c in calls(client)] == [(RENDER, 502)]


def test_render_of_an_unknown_host_answers_502(client: httpx.Client) -> None:
    r = client.post(RENDER, json={"url": "http://no-such-host.invalid/"}, headers=AUTH)
    assert (r.status_code, r.json()) == (502, error("could not load the page", "upstream_error"))


def test_render_gives_up_on_a_page_slower_than_the_timeout(
    client: httpx.Client, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stub_web, "FETCH_TIMEOUT_S", 0.3)  # the real 10 s would slow the suite
    start = time.monotonic()
    r = client.post(RENDER, json={"url": pages + "/stalled"}, headers=AUTH)
    assert time.monotonic() - start < 5
    assert (r.status_code, r.json()) == (502, error("could not load the page", "upstream_error"))


def test_render_takes_5_mb_and_refuses_one_byte_more(client: httpx.Client, pages: str) -> None:
    at_limit = client.post(RENDER, json={"url": pages + "/at-limit"}, headers=AUTH)
    assert at_limit.status_code == 200 and at_limit.json()["status"] == 200
    assert at_limit.json()["html"].count("x") == 5 * 1024 * 1024
    over = client.post(RENDER, json={"url": pages + "/big"}, headers=AUTH)
    assert (over.status_code, over.json()) == (
        502,
        error("the page is larger than 5 MB", "upstream_error"),
    )


def test_render_and_search_answer_under_any_prefix(client: httpx.Client, pages: str) -> None:
    assert client.post("/render", json={"url": pages + "/app"}, headers=AUTH).status_code == 200
    r = client.post("/a/b/search/", json={"query": "x", "max_results": 1}, headers=AUTH)
    assert r.json()["results"][0]["url"] == "https://search.example/x/1"
    assert client.get(RENDER, headers=AUTH).status_code == 405


# --------------------------------------------------------------------------- search


def expected_results(slug: str, query: str, count: int) -> list[dict[str, str]]:
    return [
        {
            "url": f"https://search.example/{slug}/{i}",
            "title": f"{query} \u2014 result {i}",
            "snippet": f"Result {i} for {query}.",
        }
        for i in range(1, count + 1)
    ]


def test_search_of_a_query_with_punctuation_answers_the_documented_results(
    client: httpx.Client,
) -> None:
    query = "  Rust: async/await \u2014 C++ 2024 Edition?! "
    r = client.post(SEARCH, json={"query": query}, headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {
        "query": query,
        "results": [
            {
                "url": f"https://search.example/rust-async-await-c-2024-edition/{i}",
                "title": f"{query} \u2014 result {i}",
                "snippet": f"Result {i} for {query}.",
            }
            for i in (1, 2, 3, 4, 5)
        ],
        "credits": 1,
    }


def test_search_answers_exactly_max_results_from_1_to_50(client: httpx.Client) -> None:
    one = client.post(SEARCH, json={"query": "Cats", "max_results": 1}, headers=AUTH).json()
    assert one == {
        "query": "Cats",
        "results": [
            {
                "url": "https://search.example/cats/1",
                "title": "Cats \u2014 result 1",
                "snippet": "Result 1 for Cats.",
            }
        ],
        "credits": 1,
    }
    fifty = client.post(SEARCH, json={"query": "Cats", "max_results": 50}, headers=AUTH).json()
    assert len(fifty["results"]) == 50
    assert fifty["results"] == expected_results("cats", "Cats", 50)
    assert fifty["results"][49]["url"] == "https://search.example/cats/50"


def test_search_results_follow_the_slug_rule(client: httpx.Client) -> None:
    assert stub_web.search_slug("--Hello__World--") == "hello-world"
    assert stub_web.search_slug("!!!") == ""
    assert stub_web.search_results("Ab", 2) == expected_results("ab", "Ab", 2)
    r = client.post(SEARCH, json={"query": "!!!", "max_results": None}, headers=AUTH)
    assert r.json()["results"] == expected_results("", "!!!", 5)


# --------------------------------------------------------------------------- refusals

BAD_URL = "url: an http or https URL is required."
BAD_WAIT = "wait_ms: a non-negative integer is required."
BAD_QUERY = "query: a non-empty string is required."
BAD_MAX = "max_results: an integer from 1 to 50 is required."
NOT_OBJECT = "The request body must be a JSON object."


@pytest.mark.parametrize(
    ("path", "content", "message"),
    [
        (RENDER, b"not json", NOT_OBJECT),
        (RENDER, b'["http://x/"]', NOT_OBJECT),
        (RENDER, b"{}", BAD_URL),
        (RENDER, b'{"url": 5}', BAD_URL),
        (RENDER, b'{"url": "ftp://example.com/"}', BAD_URL),
        (RENDER, b'{"url": "example.com/page"}', BAD_URL),
        (RENDER, b'{"url": "http://"}', BAD_URL),
        (RENDER, b'{"url": "http://x/", "wait_ms": "1"}', BAD_WAIT),
        (RENDER, b'{"url": "http://x/", "wait_ms": -1}', BAD_WAIT),
        (RENDER, b'{"url": "http://x/", "wait_ms": true}', BAD_WAIT),
        (SEARCH, b"", NOT_OBJECT),
        (SEARCH, b'"cats"', NOT_OBJECT),
        (SEARCH, b"{}", BAD_QUERY),
        (SEARCH, b'{"query": ""}', BAD_QUERY),
        (SEARCH, b'{"query": 5}', BAD_QUERY),
        (SEARCH, b'{"query": "x", "max_results": 0}', BAD_MAX),
        (SEARCH, b'{"query": "x", "max_results": 51}', BAD_MAX),
        (SEARCH, b'{"query": "x", "max_results": "5"}', BAD_MAX),
        (SEARCH, b'{"query": "x", "max_results": 2.0}', BAD_MAX),
        (SEARCH, b'{"query": "x", "max_results": true}', BAD_MAX),
    ],
)
def test_a_bad_body_answers_400_before_faults(
    client: httpx.Client, path: str, content: bytes, message: str
) -> None:
    queue(client, {"kind": "500"})
    r = client.post(path, content=content, headers=AUTH)
    assert (r.status_code, r.json()) == (400, error(message, "invalid_request_error"))
    assert [f["kind"] for f in queued(client)] == ["500"]
    assert [(c["status"], c["fault"]) for c in calls(client)] == [(400, None)]


@pytest.mark.parametrize("path", [RENDER, SEARCH])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer"}, {"Authorization": ""}])
def test_a_missing_or_empty_key_answers_401_before_faults(
    client: httpx.Client, path: str, headers: dict[str, str]
) -> None:
    queue(client, {"kind": "500"})
    r = client.post(path, json={"url": "http://x/", "query": "x"}, headers=headers)
    assert (r.status_code, r.json()) == (
        401,
        error(
            "You didn't provide an API key (Authorization: Bearer <key>).",
            "authentication_error",
        ),
    )
    assert [f["kind"] for f in queued(client)] == ["500"]
    assert [(c["key"], c["status"]) for c in calls(client)] == [(None, 401)]


def test_accept_keys_refuse_any_other_key(pages: str) -> None:
    with StubServer(accept_keys=["wk-good"]) as strict:
        for path, body in ((RENDER, {"url": pages + "/app"}), (SEARCH, {"query": "x"})):
            bad = httpx.post(
                strict.url + path, json=body, headers={"Authorization": "Bearer wk-bad"}
            )
            assert (bad.status_code, bad.json()) == (
                401,
                error("Incorrect API key provided: wk-bad.", "authentication_error"),
            )
            good = httpx.post(
                strict.url + path, json=body, headers={"Authorization": "Bearer wk-good"}
            )
            assert good.status_code == 200


# --------------------------------------------------------------------------- faults


@pytest.fixture(params=["render", "search"])
def route(request: pytest.FixtureRequest, pages: str) -> tuple[str, dict[str, Any]]:
    """(path, a valid body) of each web route."""
    if request.param == "render":
        return RENDER, {"url": pages + "/app"}
    return SEARCH, {"query": "faults", "max_results": 2}


FORBIDDEN = "The API key wk-1 is not allowed to access this resource."
STATUS_FAULTS = ({"kind": "429", "retry_after": 7}, {"kind": "401"}, {"kind": "403"}, {"kind": 500})


def test_status_faults_answer_the_web_error_with_their_status(
    client: httpx.Client, route: tuple[str, dict[str, Any]]
) -> None:
    path, body = route
    queue(client, *STATUS_FAULTS)
    answers = [client.post(path, json=body, headers=AUTH) for _ in range(4)]
    assert [(r.status_code, r.json()) for r in answers] == [
        (429, error("Rate limit reached (stub fault).", "rate_limit_error")),
        (401, error("Incorrect API key provided: wk-1.", "authentication_error")),
        (403, error(FORBIDDEN, "permission_error")),
        (500, error("The server had an error (stub fault).", "api_error")),
    ]
    assert answers[0].headers["retry-after"] == "7"
    assert answers[1].headers["x-stub-echo-key"] == "Bearer wk-1"
    assert answers[2].headers["x-stub-echo-key"] == "Bearer wk-1"
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("429", 429),
        ("401", 401),
        ("403", 403),
        ("500", 500),
    ]


def test_a_fault_with_credits_says_the_failed_call_was_billed(
    client: httpx.Client, route: tuple[str, dict[str, Any]]
) -> None:
    path, body = route
    queue(client, {"kind": "500", "credits": 2}, {"kind": "500"})
    billed, plain = (client.post(path, json=body, headers=AUTH) for _ in range(2))
    assert (billed.status_code, billed.json()) == (
        500,
        {**error("The server had an error (stub fault).", "api_error"), "credits": 2},
    )
    assert plain.json() == error("The server had an error (stub fault).", "api_error")
    assert [c.get("credits") for c in calls(client)] == [2, None]


def test_hang_never_answers(client: httpx.Client, route: tuple[str, dict[str, Any]]) -> None:
    path, body = route
    queue(client, {"kind": "hang"})
    start = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        client.post(path, json=body, headers=AUTH, timeout=0.3)
    assert time.monotonic() - start < 3
    assert [(c["fault"], c["status"]) for c in calls(client)] == [("hang", None)]


def test_slow_waits_delay_ms_then_answers(
    client: httpx.Client, route: tuple[str, dict[str, Any]]
) -> None:
    path, body = route
    queue(client, {"kind": "slow", "delay_ms": 250})
    start = time.monotonic()
    r = client.post(path, json=body, headers=AUTH)
    assert time.monotonic() - start >= 0.25
    assert r.status_code == 200 and r.json()["credits"] == 1
    assert [(c["fault"], c["status"]) for c in calls(client)] == [("slow", 200)]


def test_drop_faults_close_without_a_response(
    client: httpx.Client, route: tuple[str, dict[str, Any]]
) -> None:
    path, body = route
    queue(client, {"kind": "fail_before_first_token"}, {"kind": "fail_after_tokens"})
    for _ in range(2):
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(path, json=body, headers=AUTH)
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("fail_before_first_token", None),
        ("fail_after_tokens", None),
    ]


def test_match_key_picks_the_call_and_match_model_never_matches(
    client: httpx.Client, route: tuple[str, dict[str, Any]]
) -> None:
    path, body = route
    never, other_key_only = {"model": "stub-model"}, {"key": "wk-2"}
    queue(client, {"kind": "500", "match": never}, {"kind": "429", "match": other_key_only})
    assert client.post(path, json=body, headers=AUTH).status_code == 200
    other_key = {"Authorization": "Bearer wk-2"}
    assert client.post(path, json=body, headers=other_key).status_code == 429
    assert [f["kind"] for f in queued(client)] == ["500"]
    assert [(c["key"], c["fault"]) for c in calls(client)] == [("wk-1", None), ("wk-2", "429")]


# --------------------------------------------------------------------------- the calls log


def test_calls_are_recorded_in_order_with_path_key_and_body(
    client: httpx.Client, pages: str
) -> None:
    queue(client, {"kind": "429"})
    client.post(SEARCH, json={"query": "first"}, headers=AUTH)
    client.post("/v9/render", json={"url": pages + "/app", "wait_ms": 10}, headers=AUTH)
    client.post(RENDER, content=b"{broken", headers=AUTH)
    client.post(SEARCH, json={"query": "last", "max_results": 2})

    def call(seq: int, path: str, key: str | None, status: int, body: Any) -> dict[str, Any]:
        return {
            "seq": seq,
            "path": path,
            "shape": "web",
            "model": None,
            "key": key,
            "stream": False,
            "user": None,
            "max_tokens": None,
            "fault": "429" if seq == 1 else None,
            "status": status,
            "body": body,
            "traceparent": None,
        }

    assert calls(client) == [
        call(1, SEARCH, "wk-1", 429, {"query": "first"}),
        call(2, "/v9/render", "wk-1", 200, {"url": pages + "/app", "wait_ms": 10}),
        call(3, RENDER, "wk-1", 400, None),
        call(4, SEARCH, None, 401, {"query": "last", "max_results": 2}),
    ]
