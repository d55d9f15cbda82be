"""An account with a SCIM token, and a client that speaks SCIM to the control plane."""

from __future__ import annotations

from dataclasses import dataclass

from django.test import Client

from accounts.models import Account
from scim.tokens import scim_token_issue
from tests.support.tenants import Tenant, make_tenant

SCIM_JSON = "application/scim+json"


@dataclass
class Directory:
    tenant: Tenant
    token: str
    client: Client

    @property
    def account(self) -> Account:
        return Account.objects.get(pk=self.tenant.account_id)

    def get(self, path: str, **params):
        return self.client.get("/scim/v2" + path, params)

    def post(self, path: str, body: dict):
        return self.client.post("/scim/v2" + path, body, content_type=SCIM_JSON)

    def put(self, path: str, body: dict):
        return self.client.put("/scim/v2" + path, body, content_type=SCIM_JSON)

    def patch(self, path: str, *operations: dict):
        body = {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": list(operations),
        }
        return self.client.patch("/scim/v2" + path, body, content_type=SCIM_JSON)

    def delete(self, path: str):
        return self.client.delete("/scim/v2" + path)

    def create_user(self, user_name: str, **attrs) -> dict:
        body = {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": user_name}
        response = self.post("/Users", body | attrs)
        assert response.status_code == 201, response.content
        return response.json()

    def create_group(self, name: str, *member_ids: str) -> dict:
        body = {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": name,
            "members": [{"value": i} for i in member_ids],
        }
        response = self.post("/Groups", body)
        assert response.status_code == 201, response.content
        return response.json()


def directory(tenant: Tenant | None = None) -> Directory:
    tenant = tenant or make_tenant()
    _, secret = scim_token_issue(account=Account.objects.get(pk=tenant.account_id))
    return Directory(
        tenant=tenant, token=secret, client=Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    )
