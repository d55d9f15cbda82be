"""A directory's groups give a member the highest role the account maps any of them to."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from accounts.directory import role_for_groups
from accounts.models import Account, validate_directory_roles

ROLES = {"eng": "viewer", "eng-leads": "admin", "founders": "owner"}


def test_the_highest_mapped_role_wins_and_unmapped_groups_give_none():
    account = Account(name="acme", directory_roles=ROLES)

    assert role_for_groups(account, ["eng", "eng-leads", "sales"]) == "admin"
    assert role_for_groups(account, ["founders", "eng"]) == "owner"
    assert role_for_groups(account, ["sales", "Eng"]) is None  # names match exactly
    assert role_for_groups(account, []) is None


@pytest.mark.parametrize(
    "value",
    [["eng"], {"eng": "root"}, {"": "viewer"}, {"x" * 201: "viewer"}, {"eng": None}],
)
def test_a_mapping_to_no_role_or_of_no_name_is_refused(value):
    with pytest.raises(ValidationError):
        validate_directory_roles(value)
