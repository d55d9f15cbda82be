"""Refused admin pages log one line each, never a traceback (config/logs.py), in a real
gateway process's log."""

from __future__ import annotations

import re

import httpx
import pytest
from django.contrib.auth import get_user_model

from tests.config.admin_client import admin_login
from tests.support.waits import wait_until

PASSWORD = "a-password-for-tests-only"


def refusals(gateway) -> list[str]:
    """The gateway's refusal lines, without their timestamps."""
    return [
        re.sub(r"^\S+ \S+ ", "", line) for line in gateway.log().splitlines() if " refused " in line
    ]


def wait_for_refusals(gateway, count: int) -> list[str]:
    wait_until(lambda: len(refusals(gateway)) >= count, what=f"{count} refusal lines")
    return refusals(gateway)


@pytest.fixture
def gateway(transactional_db, spawn_gateway):
    return spawn_gateway(ALLOWED_HOSTS="127.0.0.1")


def test_superuser_refused_a_read_only_add_page_logs_one_line(gateway):
    get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    client = admin_login(gateway.url, username="root", password=PASSWORD)

    answer = client.get("/django-admin/usage/usagelog/add/", params={"token": "s3cret-value"})

    assert answer.status_code == 403
    assert wait_for_refusals(gateway, 1) == [
        "WARNING django.request refused GET /django-admin/usage/usagelog/add/ 403: "
        "Forbidden (Permission denied)"
    ]
    log = gateway.log()
    assert "Traceback" not in log
    assert "s3cret-value" not in log
    assert PASSWORD not in log


def test_staff_without_permissions_refused_a_changelist_logs_one_line(gateway):
    get_user_model().objects.create_user("clerk", password=PASSWORD, is_staff=True)
    client = admin_login(gateway.url, username="clerk", password=PASSWORD)

    assert client.get("/django-admin/accounts/account/").status_code == 403
    assert client.post("/django-admin/accounts/account/add/").status_code == 403

    assert wait_for_refusals(gateway, 2) == [
        "WARNING django.request refused GET /django-admin/accounts/account/ 403: "
        "Forbidden (Permission denied)",
        # The POST carried no CSRF token: refused before the view.
        "WARNING django.security.csrf refused POST /django-admin/accounts/account/add/ 403: "
        "Forbidden (CSRF token missing.)",
    ]
    assert "Traceback" not in gateway.log()


def test_anonymous_post_without_csrf_cookie_and_foreign_host_log_one_line_each(gateway):
    login = httpx.post(
        f"{gateway.url}/django-admin/login/", data={"username": "x", "password": PASSWORD}
    )
    foreign = httpx.get(f"{gateway.url}/django-admin/", headers={"Host": "evil.example"})
    missing = httpx.get(f"{gateway.url}/no-such-page/")

    assert (login.status_code, foreign.status_code, missing.status_code) == (403, 400, 404)
    assert wait_for_refusals(gateway, 3) == [
        "WARNING django.security.csrf refused POST /django-admin/login/ 403: "
        "Forbidden (CSRF cookie not set.)",
        "ERROR django.security.DisallowedHost refused GET /django-admin/ 400: Invalid HTTP_HOST "
        "header: 'evil.example'. You may need to add 'evil.example' to ALLOWED_HOSTS.",
        "WARNING django.request refused GET /no-such-page/ 404: Not Found",
    ]
    log = gateway.log()
    assert "Traceback" not in log
    assert PASSWORD not in log


def test_a_token_in_a_refused_path_is_redacted_and_a_newline_escaped(gateway):
    token = "cbd7p3-5f0e1a2b3c4d5e6f7a8b9c0d"
    request_id = "0123456789abcdef0123456789abcdef"

    assert httpx.get(f"{gateway.url}/no-such/MQ/{token}/").status_code == 404
    assert httpx.get(f"{gateway.url}/no-such/{request_id}/").status_code == 404
    assert httpx.get(f"{gateway.url}/no-such/%0Aforged").status_code == 404

    assert wait_for_refusals(gateway, 3) == [
        "WARNING django.request refused GET /no-such/MQ/[redacted]/ 404: Not Found",
        f"WARNING django.request refused GET /no-such/{request_id}/ 404: Not Found",
        "WARNING django.request refused GET /no-such/\\nforged 404: Not Found",
    ]
    assert token not in gateway.log()
