"""A browser's way into the Django admin of a running gateway: CSRF cookie, then the form."""

from __future__ import annotations

import re

import httpx

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def csrf_token(html: str) -> str:
    """Return the CSRF token of the page's form."""
    found = CSRF_FIELD.search(html)
    assert found is not None, f"no CSRF field in: {html[:500]}"
    return found.group(1)


def admin_login(base_url: str, *, username: str, password: str) -> httpx.Client:
    """Log into `/django-admin/` as a browser does; return the client holding the session."""
    client = httpx.Client(base_url=base_url, timeout=10)
    page = client.get("/django-admin/login/")
    assert page.status_code == 200, page.text
    answer = client.post(
        "/django-admin/login/",
        data={
            "csrfmiddlewaretoken": csrf_token(page.text),
            "username": username,
            "password": password,
            "next": "/django-admin/",
        },
    )
    assert answer.status_code == 302, answer.text
    assert answer.headers["location"] == "/django-admin/"
    return client
