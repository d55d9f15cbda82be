"""Alerts' pure rules: which thresholds spent reached, the wallet's fire-once-per-crossing
state, period keys, the retry backoff and the webhook signature."""

from __future__ import annotations

from datetime import UTC, datetime

from accounts.periods import period_key
from alerts.thresholds import backoff_s, reached, wallet_step
from core.webhook_signing import sign, verify


def keys(**kwargs) -> list[str]:
    return [key for key, _ in reached(**kwargs)]


def test_a_percent_is_reached_exactly_at_its_share_of_the_budget():
    common = {"budget_micro": 1_000, "pcts": [80, 50, 100], "amount_micro": None}
    assert keys(spent_micro=499, **common) == []
    assert keys(spent_micro=500, **common) == ["pct:50"]
    assert keys(spent_micro=799, **common) == ["pct:50"]
    assert keys(spent_micro=800, **common) == ["pct:50", "pct:80"]
    assert reached(spent_micro=1_000, **common) == [
        ("pct:50", 1_000),
        ("pct:80", 1_000),
        ("pct:100", 1_000),
    ]


def test_nothing_is_reached_without_spend_or_without_a_budget():
    assert keys(spent_micro=0, budget_micro=0, pcts=[50], amount_micro=None) == []
    assert keys(spent_micro=10, budget_micro=None, pcts=[50], amount_micro=None) == []
    assert keys(spent_micro=0, budget_micro=None, pcts=[], amount_micro=0) == []


def test_an_amount_replaces_the_percents():
    common = {"budget_micro": 100, "pcts": [50], "amount_micro": 5_000}
    assert keys(spent_micro=4_999, **common) == []
    assert reached(spent_micro=5_000, **common) == [("amount:5000", 5_000)]


def test_a_wallet_rule_fires_once_per_crossing_and_rearms_back_at_the_floor():
    assert wallet_step(balance_micro=1_000, floor_micro=1_000, armed=True) == (False, True)
    assert wallet_step(balance_micro=999, floor_micro=1_000, armed=True) == (True, False)
    assert wallet_step(balance_micro=10, floor_micro=1_000, armed=False) == (False, False)
    assert wallet_step(balance_micro=1_000, floor_micro=1_000, armed=False) == (False, True)


def test_period_keys_are_the_accounts_calendar_day_or_month():
    now = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)
    assert period_key("daily", "UTC", now) == "2026-12-31"
    assert period_key("monthly", "UTC", now) == "2026-12"
    assert period_key("monthly", "Europe/Berlin", now) == "2027-01"  # 00:30 there
    assert period_key("none", "Europe/Berlin", now) == "all"


def test_the_backoff_doubles_from_its_base_up_to_an_hour():
    assert [backoff_s(n, base_s=30) for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert backoff_s(20, base_s=30) == 3600
    assert [backoff_s(n, base_s=1) for n in (1, 2, 3)] == [1, 2, 4]


def test_a_signature_verifies_only_for_its_body_secret_and_time():
    body = b'{"id":"alert_1"}'
    header = sign(body, secret="whsec_x", timestamp=1_800_000_000)
    assert header == (
        "t=1800000000,v1="
        + __import__("hmac").new(b"whsec_x", b"1800000000." + body, "sha256").hexdigest()
    )
    assert verify(body, header, secret="whsec_x", now=1_800_000_100)
    assert not verify(body + b" ", header, secret="whsec_x", now=1_800_000_100)
    assert not verify(body, header, secret="whsec_y", now=1_800_000_100)
    assert not verify(body, header, secret="whsec_x", now=1_800_000_301)  # a replay, too late
    assert not verify(body, "v1=abc", secret="whsec_x", now=1_800_000_000)
