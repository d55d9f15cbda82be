"""Drive the BYOK admin routes over real HTTP (they are served by the gateway process too)."""

from __future__ import annotations

import httpx

from tests.support.stacks import Stack
from tests.support.tenants import Tenant


class Byok:
    def __init__(self, stack: Stack, tenant: Tenant, url: str | None = None) -> None:
        self.base = f"{url or stack.url}/admin/groups/{tenant.group_id}/byok"
        self.headers = {"Authorization": f"Token {tenant.api_token}"}

    def list(self) -> httpx.Response:
        return httpx.get(self.base, headers=self.headers)

    def fallback(self, provider: str, on: bool) -> httpx.Response:
        return httpx.put(f"{self.base}/{provider}", headers=self.headers, json={"fallback": on})

    def add(self, provider: str, label: str, key: str) -> httpx.Response:
        return httpx.post(
            f"{self.base}/{provider}/keys", headers=self.headers, json={"label": label, "key": key}
        )

    def delete(self, key_id: int) -> httpx.Response:
        return httpx.delete(f"{self.base}/keys/{key_id}", headers=self.headers)


def team_keys(
    stack: Stack, tenant: Tenant, provider: str, secrets: list[str], *, fallback: bool = False
) -> list[int]:
    """Give a tenant a pool of team keys; return their ids (the gateway reloads pools)."""
    api = Byok(stack, tenant)
    ids = []
    for index, secret in enumerate(secrets):
        response = api.add(provider, f"key-{index}", secret)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    assert api.fallback(provider, fallback).status_code == 200
    stack.gateway.reload()
    return ids
