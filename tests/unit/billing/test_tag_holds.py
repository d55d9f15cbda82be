"""Which of a request's tags hold on a budget, in which period's row, and what a refusal says:
pure logic of gateway/tags.py, accounts/periods.py and billing/tag_ledger.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.periods import period_key
from billing.tag_ledger import TagHold, refusal_message, refused
from gateway.auth import Principal, TagLimit
from gateway.tags import tag_holds

# 23:30 UTC on Dec 31st: already Jan 1st in Auckland, still Dec 31st in New York.
NOW = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("period", "zone", "key"),
    [
        ("daily", "UTC", "2026-12-31"),
        ("daily", "Pacific/Auckland", "2027-01-01"),
        ("monthly", "Pacific/Auckland", "2027-01"),
        ("monthly", "America/New_York", "2026-12"),
        ("none", "Pacific/Auckland", "all"),
    ],
)
def test_a_period_is_named_in_the_accounts_time_zone(period, zone, key):
    assert period_key(period, zone, NOW) == key


def principal(*limits: TagLimit, zone: str = "Pacific/Auckland") -> Principal:
    return Principal(
        account_id=7,
        billing_mode="prepaid",
        group_id=1,
        group_budget_max_micro=None,
        group_rpm=None,
        group_tpm=None,
        group_concurrency=None,
        bandwidth_micro_per_gb=0,
        tag_budgets=limits,
        time_zone=zone,
    )


def test_only_the_requests_budgeted_tags_hold_each_in_its_own_period():
    who = principal(
        TagLimit("customer-42", 500, "daily"),
        TagLimit("team-a", 900, "monthly"),
        TagLimit("unused", 1, "none"),
    )
    assert tag_holds(who, ("team-a", "free", "customer-42"), NOW) == (
        TagHold("customer-42", "2027-01-01", 7, 500, "daily", "Pacific/Auckland"),
        TagHold("team-a", "2027-01", 7, 900, "monthly", "Pacific/Auckland"),
    )
    assert tag_holds(who, (), NOW) == ()
    assert tag_holds(principal(), ("customer-42",), NOW) == ()


def test_a_refusal_names_the_tag_and_when_its_period_resets():
    tags = [
        TagHold("a", "2027-01-01", 7, 5, "daily", "Pacific/Auckland"),
        TagHold("b", "all", 7, 5, "none", "UTC"),
    ]
    assert refusal_message(tags, refused("a"), now=NOW) == (
        "Budget exhausted: tag 'a' has used its budget; this daily budget resets at "
        "2027-01-01T11:00:00+00:00."  # midnight of Jan 2nd in Auckland (UTC+13)
    )
    assert refusal_message(tags, refused("b"), now=NOW) == (
        "Budget exhausted: tag 'b' has used its budget."
    )
    assert refusal_message(tags, "group budget", now=NOW) is None
