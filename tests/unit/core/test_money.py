from __future__ import annotations

import re

import pytest

from core import money
from core.money import (
    TokenPrices,
    bandwidth_charge_micro,
    ceil_div,
    gateway_rate_micro_per_gb,
    prompt_tokens_bound,
    with_margin_micro,
)


def test_ceil_div_rounds_up_only_a_remainder():
    assert [ceil_div(n, 4) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


MINI = TokenPrices.configured(input_micro_per_mtok=150_000, output_micro_per_mtok=600_000)


def test_token_cost_rounds_up_once_over_the_sum():
    # 3 x 0.15 + 1 x 0.60 = 1.05 micro-USD -> 2 (one rounding, not one per side).
    assert MINI.cost_micro(tokens_in=3, tokens_out=1) == 2
    assert MINI.cost_micro(tokens_in=1_000_000, tokens_out=0) == 150_000
    assert MINI.cost_micro(tokens_in=0, tokens_out=0) == 0


def test_cache_reads_and_writes_are_priced_at_their_own_rates():
    haiku = TokenPrices(800_000, 4_000_000, 80_000, 1_000_000)
    # 10 plain x 0.8 + 20 read x 0.08 + 30 written x 1.0 + 5 out x 4.0 = 59.6 -> 60.
    cost = haiku.cost_micro(tokens_in=60, tokens_out=5, cache_read_tokens=20, cache_write_tokens=30)
    assert cost == 60


def test_a_cache_price_not_set_is_the_input_price():
    prices = TokenPrices.configured(
        input_micro_per_mtok=800_000, output_micro_per_mtok=4_000_000, cache_write_micro_per_mtok=0
    )
    assert prices == TokenPrices(800_000, 4_000_000, 800_000, 0)


def test_scaled_prices_round_each_price_down():
    assert TokenPrices(999, 1_000, 15, 0).scaled(10) == TokenPrices(99, 100, 1, 0)


def test_token_prices_as_json_are_named_as_their_columns():
    assert TokenPrices(1, 2, 3, 4).as_json() == {
        "input_micro_per_mtok": 1,
        "output_micro_per_mtok": 2,
        "cached_input_micro_per_mtok": 3,
        "cache_write_micro_per_mtok": 4,
    }


def test_bandwidth_charge_is_ceiling_of_bytes_times_rate_over_a_gigabyte():
    assert bandwidth_charge_micro(total_bytes=1_000_000_000, micro_per_gb=80_000) == 80_000
    assert bandwidth_charge_micro(total_bytes=1, micro_per_gb=80_000) == 1
    assert bandwidth_charge_micro(total_bytes=12_500, micro_per_gb=80_000) == 1
    assert bandwidth_charge_micro(total_bytes=12_501, micro_per_gb=80_000) == 2
    assert bandwidth_charge_micro(total_bytes=10**12, micro_per_gb=0) == 0


def test_gateway_rate_is_floor_of_price_over_markup():
    assert gateway_rate_micro_per_gb(price_micro_per_gb=100_000, markup_bp=12_500) == 80_000
    assert gateway_rate_micro_per_gb(price_micro_per_gb=100_001, markup_bp=30_000) == 33_333


def test_margin_rounds_up():
    assert with_margin_micro(10, margin_pct=120) == 12
    assert with_margin_micro(11, margin_pct=120) == 14


def test_ceil_div_is_exact_on_amounts_past_float_precision():
    assert ceil_div(10**18 + 1, 10**6) == 10**12 + 1
    assert ceil_div(10**18, 10**6) == 10**12


def test_token_cost_of_a_large_call_is_exact_to_the_micro_usd():
    # 123,456,789 x 2.5 + 98,765,432 x 10 = 1,296,296,292.5 micro-USD -> 1,296,296,293.
    assert (
        TokenPrices.configured(
            input_micro_per_mtok=2_500_000, output_micro_per_mtok=10_000_000
        ).cost_micro(tokens_in=123_456_789, tokens_out=98_765_432)
        == 1_296_296_293
    )


def test_prompt_bound_counts_every_byte_plus_eight_per_message_and_eight():
    assert prompt_tokens_bound(prompt_bytes=0, messages=0) == 8
    assert prompt_tokens_bound(prompt_bytes=11, messages=1) == 27
    assert prompt_tokens_bound(prompt_bytes=13, messages=2) == 37


@pytest.mark.parametrize(
    "micro, shown, exact",
    [
        (0, "$0.00", "$0.00"),
        (1, "$0.000001", "$0.000001"),
        (2_520, "$0.00252", "$0.00252"),
        (9_999, "$0.009999", "$0.009999"),
        (10_000, "$0.01", "$0.01"),
        (994_999, "$0.99", "$0.994999"),
        (995_000, "$1.00", "$0.995"),  # half a cent rounds away from zero
        (99_989_770, "$99.99", "$99.98977"),
        (1_234_567_890, "$1,234.57", "$1,234.56789"),
        (-5_000, "-$0.005", "-$0.005"),
        (-2_500_000, "-$2.50", "-$2.50"),
    ],
)
def test_dollars_for_people_show_cents_and_more_digits_only_under_a_cent(micro, shown, exact):
    assert (money.format_usd(micro), money.format_usd_exact(micro)) == (shown, exact)


@pytest.mark.parametrize(
    "typed, micro",
    [
        ("5", 5_000_000),
        ("5.00", 5_000_000),
        (" $5.00 ", 5_000_000),
        ("1,234.5", 1_234_500_000),
        ("0.000001", 1),
        (".5", 500_000),
        ("5.", 5_000_000),
    ],
)
def test_a_typed_dollar_amount_is_read_exactly(typed, micro):
    assert money.parse_usd(typed) == micro


@pytest.mark.parametrize(
    "typed, says",
    [
        ("", "Type an amount"),
        ("$", "Type an amount"),
        ("abc", "is not an amount"),
        ("5.00.1", "is not an amount"),
        ("²", "is not an amount"),
        ("1.0000001", "at most six decimals"),
        ("-2", "must be positive"),
        ("1000000001", "at most $1,000,000,000.00"),
    ],
)
def test_a_typed_amount_that_is_not_one_is_refused_in_words(typed, says):
    with pytest.raises(money.AmountInvalid, match=re.escape(says)):
        money.parse_usd(typed)


def test_an_adjustment_may_be_negative_when_asked_for():
    assert money.parse_usd("-2.50", allow_negative=True) == -2_500_000


@pytest.mark.parametrize(
    "micro, places",
    [(0, 2), (6, 6), (-6, 6), (2_520, 5), (9_900, 4), (10_000, 2), (12_345, 2), (-5_000_000, 2)],
)
def test_an_amount_shows_cents_or_every_digit_under_a_cent(micro, places):
    assert money.usd_places(micro) == places
    assert len(money.format_usd(micro).split(".")[1]) == places


def test_amounts_read_together_share_the_finest_precision_any_of_them_shows():
    assert money.finest_places([5_000_000, -6, None, 2_520]) == 6
    assert money.finest_places([5_000_000, 12_345]) == 2  # nothing under a cent: cents
    assert money.finest_places([]) == 2


@pytest.mark.parametrize(
    "micro, places, shown",
    [
        (99_999_994, 6, "$99.999994"),
        (105_000_000, 6, "$105.000000"),  # a column reads at one precision
        (104_999_762, 2, "$105.00"),
        (123_456, 4, "$0.1235"),  # half away from zero
        (-1, 2, "$0.00"),  # what rounds to nothing has no sign
        (-2_520, 5, "-$0.00252"),
        (1_234_567_890_123, 6, "$1,234,567.890123"),
    ],
)
def test_dollars_at_a_shared_precision_have_exactly_that_many_decimals(micro, places, shown):
    assert money.format_usd(micro, places=places) == shown


def test_a_balance_beside_sub_cent_amounts_moves_by_each_of_them_as_shown():
    """The issue's ledger: 24 debits of $0.000006 from $100.00 each read as a new balance."""
    amounts = [-6] * 24
    balances = [100_000_000 - 6 * (n + 1) for n in range(24)]
    places = money.finest_places(amounts)
    shown = [money.format_usd(b, places=places) for b in balances]
    assert shown[:2] == ["$99.999994", "$99.999988"] and shown[-1] == "$99.999856"
    assert len(set(shown)) == 24  # never frozen
    assert {money.format_usd(b) for b in balances} == {"$100.00"}  # what cents alone showed
