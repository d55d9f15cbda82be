"""The tenant API answers a database outage with JSON LM-5004 (503, Retry-After), never
Django's HTML "Server Error (500)", and serves again once the database is back.

A real gateway process (config.asgi serves the tenant API too) reaches PostgreSQL through a
TCP relay the test cuts: an outage of that process alone, the test's own database untouched.
"""

from __future__ import annotations

import httpx

from core.errors import DependencyDown
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from tests.support.waits import wait_until


@requires_postgres
def test_a_database_outage_is_json_lm_5004_with_retry_after_then_the_api_serves_again(
    spawn_gateway, database_relay, transactional_db
):
    relay, relayed_url = database_relay
    gateway = spawn_gateway(DATABASE_URL=relayed_url)
    tenant = make_tenant()
    api = httpx.Client(
        base_url=gateway.url, timeout=10, headers={"Authorization": f"Token {tenant.api_token}"}
    )
    group = f"/api/groups/{tenant.group_id}"
    assert api.get(group).status_code == 200

    relay.cut()
    during = [
        api.get("/api/groups"),
        api.get(group),
        api.patch(group, json={"rpm_limit": 10}),
        api.post("/api/keys", json={"group": tenant.group_id}),
        api.get(f"/admin/groups/{tenant.group_id}/byok"),
        api.get("/api/usage"),
        api.get(f"/api/accounts/{tenant.account_id}/wallet"),
    ]
    no_route = api.get("/api/no-such-route")  # answered before any query: still a 404
    relay.restore()

    def served() -> httpx.Response | None:
        answer = api.get(group)
        return answer if answer.status_code < 500 else None

    after = wait_until(served, timeout_s=15, interval_s=0.2, what="the database back")
    api.close()

    expected = {
        "message": DependencyDown.default_message,
        "type": "api_error",
        "code": "LM-5004",
    }
    for answer in during:
        said = f"{answer.request.method} {answer.request.url.path}"
        assert answer.status_code == 503, (said, answer.text[:300])
        assert answer.headers["content-type"] == "application/json", said
        assert answer.json() == {"error": expected}, said
        assert answer.headers["retry-after"] == "5", said
    assert (no_route.status_code, no_route.json()["error"]["code"]) == (404, "LM-2004")
    assert after.status_code == 200 and after.json()["id"] == tenant.group_id
    assert after.json()["rpm_limit"] is None  # the PATCH during the outage changed nothing
