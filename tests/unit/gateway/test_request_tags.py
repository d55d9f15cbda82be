"""A request's tags (gateway/tags.py): its own first, then its key's and group's defaults."""

from __future__ import annotations

import pytest

from core.errors import InvalidRequest
from core.tags import MAX_TAGS, stored_tags
from gateway.auth import Principal
from gateway.context import Meter, RequestContext
from gateway.tags import tag_request


def context(default_tags: tuple[str, ...] = ()) -> RequestContext:
    principal = Principal(
        account_id=7,
        billing_mode="prepaid",
        group_id=70,
        group_budget_max_micro=None,
        group_rpm=None,
        group_tpm=None,
        group_concurrency=None,
        bandwidth_micro_per_gb=0,
        api_key_id=700,
        default_tags=default_tags,
    )
    return RequestContext(request_id="r1", endpoint="chat", meter=Meter(), principal=principal)


def test_header_and_body_tags_come_first_then_the_defaults():
    ctx = context(default_tags=("team:search", "env:prod"))
    tag_request(ctx, b"Customer-42, env:prod", ["feature:chat"])
    assert ctx.tags == ("customer-42", "env:prod", "feature:chat", "team:search")


def test_no_tags_anywhere_is_an_empty_tuple():
    ctx = context()
    tag_request(ctx, None)
    assert ctx.tags == ()


def test_a_bad_tag_is_refused_in_our_error_language():
    with pytest.raises(InvalidRequest, match="Tag 'bad tag' is not valid"):
        tag_request(context(), b"ok,bad tag")


def test_the_request_may_not_send_more_than_the_cap_between_header_and_body():
    header = ",".join(f"h{i}" for i in range(MAX_TAGS)).encode()
    with pytest.raises(InvalidRequest, match=f"At most {MAX_TAGS}"):
        tag_request(context(), header, ["one-more"])


def test_defaults_that_do_not_fit_are_left_off():
    header = ",".join(f"h{i}" for i in range(MAX_TAGS)).encode()
    ctx = context(default_tags=("team:search",))
    tag_request(ctx, header)
    assert ctx.tags == tuple(f"h{i}" for i in range(MAX_TAGS))


def test_stored_defaults_skip_what_is_not_a_tag_and_merge_key_before_group():
    assert stored_tags(["Team:A", "no spaces allowed", 3], ["team:a", "env:prod"], None) == (
        "team:a",
        "env:prod",
    )
