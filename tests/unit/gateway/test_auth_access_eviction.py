"""gateway.auth.PrincipalCache: an access group's change (the bus's GROUP topic with the
account's id) drops every cached key and group of that account and nothing of another's."""

from __future__ import annotations

import time

from accounts.model_access import policy_of
from gateway.auth import PrincipalCache
from tests.unit.gateway.test_plan import principal


def test_an_accounts_access_change_drops_its_keys_and_groups_only():
    cache = PrincipalCache()
    now = time.monotonic()
    mine = principal(account_id=1, group_id=10, access=policy_of(key_names=["o1"]))
    theirs = principal(account_id=2, group_id=20)
    cache._keys.update({"mine": (mine, now), "theirs": (theirs, now)})
    cache._groups.update({10: (mine, now), 20: (theirs, now)})
    before = cache._evictions

    cache.evict_group({"account_id": 1})

    assert (sorted(cache._keys), sorted(cache._groups)) == (["theirs"], [20])
    assert cache._evictions == before + 1  # a lookup under way reads again
