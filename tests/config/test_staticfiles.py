"""Static files through a real gateway process: the admin and the browsable API are styled."""

from __future__ import annotations

import re
from pathlib import Path

import django
import httpx
import pytest
import rest_framework

from tests.support.tenants import make_tenant
from tests.support.waits import wait_until

ADMIN_CSS = Path(django.__file__).parent / "contrib/admin/static/admin/css/base.css"
DRF_CSS = Path(rest_framework.__file__).parent / "static/rest_framework/css/bootstrap.min.css"


@pytest.fixture
def gateway(transactional_db, spawn_gateway):
    return spawn_gateway()


def test_admin_stylesheet_is_served_whole_as_css(gateway):
    response = httpx.get(f"{gateway.url}/static/admin/css/base.css")

    assert response.status_code == 200
    assert response.headers["content-type"] == 'text/css; charset="utf-8"'
    assert response.headers["cache-control"] == "max-age=60, public"
    assert response.content == ADMIN_CSS.read_bytes()


def test_admin_login_page_links_stylesheets_that_answer(gateway):
    page = httpx.get(f"{gateway.url}/django-admin/login/")

    assert page.status_code == 200
    links = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page.text)
    assert "/static/admin/css/base.css" in links
    assert "/static/admin/css/login.css" in links
    for href in links:
        css = httpx.get(f"{gateway.url}{href}")
        assert (css.status_code, css.headers["content-type"]) == (200, 'text/css; charset="utf-8"')


def test_browsable_api_page_links_stylesheets_that_answer(gateway):
    # An error is JSON whatever the client accepts (issue 38); a signed-in browser's page is
    # the browsable API's.
    refused = httpx.get(f"{gateway.url}/api/account", headers={"Accept": "text/html"})
    assert (refused.status_code, refused.headers["content-type"]) == (401, "application/json")
    tenant = make_tenant()
    page = httpx.get(
        f"{gateway.url}/api/account",
        headers={"Accept": "text/html", "Authorization": f"Token {tenant.api_token}"},
    )

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    links = re.findall(r'<link rel="stylesheet" type="text/css" href="([^"]+)"', page.text)
    assert "/static/rest_framework/css/bootstrap.min.css" in links
    for href in links:
        assert httpx.get(f"{gateway.url}{href}").status_code == 200
    bootstrap = httpx.get(f"{gateway.url}/static/rest_framework/css/bootstrap.min.css")
    assert bootstrap.content == DRF_CSS.read_bytes()


def test_head_conditional_and_range_requests_answer_as_http_says(gateway):
    url = f"{gateway.url}/static/admin/css/base.css"
    size = ADMIN_CSS.stat().st_size

    head = httpx.head(url)
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", str(size))
    again = httpx.get(url, headers={"If-None-Match": head.headers["etag"]})
    assert (again.status_code, again.content) == (304, b"")
    part = httpx.get(url, headers={"Range": "bytes=0-9"})
    assert (part.status_code, part.content) == (206, ADMIN_CSS.read_bytes()[:10])


def test_missing_static_file_is_one_404_line_and_serving_logs_no_warning(gateway):
    httpx.get(f"{gateway.url}/static/admin/css/base.css")
    missing = httpx.get(f"{gateway.url}/static/admin/css/nope.css")

    assert missing.status_code == 404
    line = "refused GET /static/admin/css/nope.css 404: Not Found"
    log = wait_until(lambda: line in gateway.log() and gateway.log(), what="the 404 line")
    # Django under ASGI warns about a file streamed through a sync iterator; ours is async.
    assert "Warning" not in log
    assert "No directory at" not in log
