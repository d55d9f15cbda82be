"""A directory's PATCHes of one group, sent at once (as Okta pushes a group's members), each
apply to the others' result: none is lost."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from accounts.models import Account
from scim.models import ScimGroup
from scim.tokens import scim_token_issue

PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


def test_concurrent_member_patches_of_one_group_lose_none(stack):
    tenant = stack.tenant()
    _, secret = scim_token_issue(account=Account.objects.get(pk=tenant.account_id))
    headers = {"Authorization": f"Bearer {secret}"}
    base = f"{stack.url}/scim/v2"
    with httpx.Client(base_url=base, headers=headers, timeout=30) as directory:
        ids = [
            directory.post("/Users", json={"userName": f"u{i}@example.com"}).json()["id"]
            for i in range(12)
        ]
        group = directory.post("/Groups", json={"displayName": "eng"}).json()["id"]

    def add(user_id: str) -> int:
        operation = {"op": "add", "path": "members", "value": [{"value": user_id}]}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            answer = client.patch(
                f"/Groups/{group}", json={"schemas": [PATCH_OP], "Operations": [operation]}
            )
        return answer.status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = list(pool.map(add, ids))

    assert statuses == [200] * 12
    members = ScimGroup.objects.get(pk=int(group)).members.values_list("pk", flat=True)
    assert sorted(members) == sorted(int(i) for i in ids)
