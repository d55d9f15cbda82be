"""A pool's last key: removed by the API without asking, kept when a change that asks first
(the dashboard) was not confirmed, even when two removals race for a pool's last two keys."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from accounts.models import Group
from byok.models import KeyPool, TeamKey
from byok.services import LastTeamKey, team_key_add, team_key_delete
from tests.support.profiles import install_profiles
from tests.support.tenants import make_tenant


def pool_of(*secrets: str) -> list[TeamKey]:
    group = Group.objects.get(pk=make_tenant().group_id)
    return [
        team_key_add(group=group, provider="stub-openai", label=f"k{n}", key=secret)
        for n, secret in enumerate(secrets)
    ]


def test_the_last_key_is_kept_unless_removing_it_was_confirmed(transactional_db, stub):
    install_profiles(stub.url)
    first, last = pool_of("sk-team-1111", "sk-team-2222")

    team_key_delete(team_key=first, keep_last=True)  # another key is left: no question
    with pytest.raises(LastTeamKey) as kept:
        team_key_delete(team_key=last, keep_last=True)

    assert str(kept.value) == "k1 (…2222) is the last key of its pool."
    assert list(TeamKey.objects.all()) == [last]
    team_key_delete(team_key=last)  # the API's removal (and a confirmed one): no question
    assert not TeamKey.objects.exists()
    assert KeyPool.objects.count() == 1  # the pool stays, empty, with its fallback flag


def test_two_removals_at_once_never_empty_a_pool_unasked(transactional_db, stub):
    install_profiles(stub.url)
    keys = pool_of("sk-team-3333", "sk-team-4444")
    start = threading.Barrier(len(keys))
    outcomes: dict[int, str] = {}

    def remove(team_key: TeamKey) -> None:
        try:
            start.wait()
            team_key_delete(team_key=team_key, keep_last=True)
            outcomes[team_key.pk] = "removed"
        except LastTeamKey:
            outcomes[team_key.pk] = "kept"
        finally:
            connection.close()

    threads = [threading.Thread(target=remove, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes.values()) == ["kept", "removed"]
    [kept] = [pk for pk, outcome in outcomes.items() if outcome == "kept"]
    assert list(TeamKey.objects.values_list("pk", flat=True)) == [kept]
