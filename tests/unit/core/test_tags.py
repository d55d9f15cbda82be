"""Request tags' rules (core/tags.py): what a header, a body or a default may carry."""

from __future__ import annotations

import pytest

from core.tags import MAX_TAGS, TagError, clean_tags, merge_tags, parse_tag_header


def test_a_header_is_lower_cased_trimmed_and_deduplicated():
    assert parse_tag_header(" Team-A, feature:search ,,team-a, eu/prod ") == (
        "team-a",
        "feature:search",
        "eu/prod",
    )


@pytest.mark.parametrize(
    "bad",
    ["", "-leading", "has space", "x" * 65, "semi;colon", "ünïcode", "new\nline"],
)
def test_a_tag_outside_the_rules_is_refused_with_the_rule(bad):
    with pytest.raises(TagError, match="1-64 characters"):
        clean_tags([bad])


def test_a_non_string_tag_is_refused():
    with pytest.raises(TagError, match="strings"):
        clean_tags([3])


def test_more_than_the_cap_is_refused_but_duplicates_do_not_count():
    assert len(clean_tags([f"t{i}" for i in range(MAX_TAGS)] + ["t0"])) == MAX_TAGS
    with pytest.raises(TagError, match=f"At most {MAX_TAGS}"):
        clean_tags([f"t{i}" for i in range(MAX_TAGS + 1)])


def test_defaults_fill_what_the_request_leaves_and_never_push_its_own_out():
    own = tuple(f"r{i}" for i in range(MAX_TAGS - 1))
    assert merge_tags(own, ("k1", "r0", "k2"), ("g1",)) == (*own, "k1")
    assert merge_tags((), ("k1",), ("g1", "k1")) == ("k1", "g1")
