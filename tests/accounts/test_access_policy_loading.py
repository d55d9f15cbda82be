"""The policy the gateway loads with a key (accounts.access_groups.policy_for_key, one query
for both sides) is the rule's own combination of what the rows say, over random access groups
and random assignments to two keys and two groups, on the real PostgreSQL test database
(each example rolled back)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.access_groups import policy_for_group, policy_for_key
from accounts.model_access import AccessPolicy, Rule
from accounts.models import AccessGroup, ApiKey, Group
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db

ENTRIES = ["gpt-4o-mini", "gpt-*", "anthropic/*", "o1", "stub-openai/*", "*-mini"]


@contextmanager
def rolled_back() -> Iterator[None]:
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


@pytest.fixture
def rows() -> tuple[list[ApiKey], list[Group]]:
    tenant = make_tenant()
    first = Group.objects.get(pk=tenant.group_id)
    second = Group.objects.create(account=first.account, name="second")
    keys = [
        ApiKey.objects.get(pk=tenant.api_key_id),
        ApiKey.objects.create(group=first, prefix="tg-b", key_hash="b" * 64),
        ApiKey.objects.create(group=second, prefix="tg-c", key_hash="c" * 64),
    ]
    # Another account's access group on a key of its own: never in this account's policies.
    theirs = make_tenant()
    foreign = AccessGroup.objects.create(account_id=theirs.account_id, name="x", entries=["*"])
    foreign.keys.set([theirs.api_key_id])
    foreign.groups.set([theirs.group_id])
    return keys, [first, second]


def side(rule: Rule | None) -> frozenset[str] | None:
    return None if rule is None else frozenset(rule.entries)


def sides(policy: AccessPolicy) -> tuple[frozenset[str] | None, frozenset[str] | None]:
    return side(policy.key), side(policy.group)


access_groups = st.lists(
    st.tuples(
        st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=3, unique=True),
        st.sets(st.integers(0, 2), max_size=3),  # the keys it is assigned to
        st.sets(st.integers(0, 1), max_size=2),  # the groups
    ),
    max_size=4,
)
own_names = st.lists(
    st.lists(st.sampled_from(ENTRIES), max_size=2, unique=True), min_size=3, max_size=3
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(made=access_groups, names=own_names)
def test_the_loaded_policy_is_what_the_rows_say(rows, made, names):
    keys, groups = rows
    with rolled_back():
        for key, own in zip(keys, names, strict=True):
            ApiKey.objects.filter(pk=key.pk).update(allowed_models=own)
        for n, (entries, to_keys, to_groups) in enumerate(made):
            row = AccessGroup.objects.create(
                account_id=groups[0].account_id, name=f"a{n}", entries=entries
            )
            row.keys.set([keys[i] for i in to_keys])
            row.groups.set([groups[i] for i in to_groups])
        for index, key in enumerate(keys):
            key = ApiKey.objects.select_related("group").get(pk=key.pk)
            own = [e for entries, to_keys, _ in made if index in to_keys for e in entries]
            group_index = groups.index(next(g for g in groups if g.pk == key.group_id))
            bounds = [entries for entries, _, to_groups in made if group_index in to_groups]
            expected_key = (
                frozenset([*names[index], *own])
                if names[index] or any(index in k for _, k, _ in made)
                else None
            )
            expected_group = frozenset(e for b in bounds for e in b) if bounds else None
            assert sides(policy_for_key(key)) == (expected_key, expected_group), index
            assert sides(policy_for_group(key.group)) == (None, expected_group)


def test_a_group_with_no_access_groups_bounds_nothing(rows):
    keys, groups = rows
    assert policy_for_key(keys[0]).unrestricted
    assert policy_for_group(groups[0]).unrestricted
