"""Integer micro-USD arithmetic. Every rounding in Tollgate happens here, and rounds up."""

from __future__ import annotations

MICRO_PER_TOKEN_DIVISOR = 1_000_000  # prices are per million tokens
BYTES_PER_GB = 1_000_000_000


def ceil_div(numerator: int, denominator: int) -> int:
    """Divide non-negative integers, rounding up."""
    return -(-numerator // denominator)


def token_cost_micro(
    *,
    tokens_in: int,
    tokens_out: int,
    input_micro_per_mtok: int,
    output_micro_per_mtok: int,
    cache_read_tokens: int = 0,
    cached_input_micro_per_mtok: int = 0,
    cache_write_tokens: int = 0,
    cache_write_micro_per_mtok: int = 0,
) -> int:
    """Return the provider cost of a call in micro-USD (one rounding, up).

    `tokens_in` counts every prompt token; those read from or written to the vendor's
    prompt cache are priced at their own rates, the rest at the input price.
    """
    plain_in = tokens_in - cache_read_tokens - cache_write_tokens
    return ceil_div(
        plain_in * input_micro_per_mtok
        + cache_read_tokens * cached_input_micro_per_mtok
        + cache_write_tokens * cache_write_micro_per_mtok
        + tokens_out * output_micro_per_mtok,
        MICRO_PER_TOKEN_DIVISOR,
    )


def bandwidth_charge_micro(*, total_bytes: int, micro_per_gb: int) -> int:
    """Return the bandwidth charge: ceil(bytes x rate / 10^9); a rate of 0 disables it."""
    if micro_per_gb <= 0 or total_bytes <= 0:
        return 0
    return ceil_div(total_bytes * micro_per_gb, BYTES_PER_GB)


def with_margin_micro(amount_micro: int, *, margin_pct: int) -> int:
    """Return an amount times a safety margin given in percent (120 = x1.2), rounded up."""
    return ceil_div(amount_micro * margin_pct, 100)


def gateway_rate_micro_per_gb(*, price_micro_per_gb: int, markup_bp: int) -> int:
    """Return the group rate floor(price / markup), markup in basis points (12500 = 1.25x)."""
    return price_micro_per_gb * 10_000 // max(markup_bp, 1)


def prompt_tokens_bound(*, prompt_bytes: int, messages: int) -> int:
    """Return an upper bound on prompt tokens: a BPE token covers at least one byte."""
    return prompt_bytes + 8 * messages + 8
