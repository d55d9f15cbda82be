"""Integer micro-USD arithmetic. Every rounding in Tollgate happens here, and rounds up."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

MICRO_PER_TOKEN_DIVISOR = 1_000_000  # prices are per million tokens
BYTES_PER_GB = 1_000_000_000


def ceil_div(numerator: int, denominator: int) -> int:
    """Divide non-negative integers, rounding up."""
    return -(-numerator // denominator)


@dataclass(frozen=True, slots=True)
class TokenPrices:
    """What a model's tokens cost, in micro-USD per million tokens of each kind.

    The field names are the model row's columns, the profiles JSON's and the tenant API's
    keys (`as_json`), so a new kind of price is a field here and a column.
    """

    input_micro_per_mtok: int
    output_micro_per_mtok: int
    cached_input_micro_per_mtok: int  # prompt tokens read from the vendor's prompt cache
    cache_write_micro_per_mtok: int  # prompt tokens written to it

    @classmethod
    def configured(
        cls,
        *,
        input_micro_per_mtok: int,
        output_micro_per_mtok: int,
        cached_input_micro_per_mtok: int | None = None,
        cache_write_micro_per_mtok: int | None = None,
    ) -> TokenPrices:
        """Return prices as an operator sets them: a cache price not set is the input price."""
        return cls(
            input_micro_per_mtok=input_micro_per_mtok,
            output_micro_per_mtok=output_micro_per_mtok,
            cached_input_micro_per_mtok=_or(cached_input_micro_per_mtok, input_micro_per_mtok),
            cache_write_micro_per_mtok=_or(cache_write_micro_per_mtok, input_micro_per_mtok),
        )

    def cost_micro(
        self,
        *,
        tokens_in: int,
        tokens_out: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> int:
        """Return what a call's tokens cost in micro-USD (one rounding, up).

        `tokens_in` counts every prompt token; those read from or written to the vendor's
        prompt cache are priced at their own rates, the rest at the input price.
        """
        plain_in = tokens_in - cache_read_tokens - cache_write_tokens
        return ceil_div(
            plain_in * self.input_micro_per_mtok
            + cache_read_tokens * self.cached_input_micro_per_mtok
            + cache_write_tokens * self.cache_write_micro_per_mtok
            + tokens_out * self.output_micro_per_mtok,
            MICRO_PER_TOKEN_DIVISOR,
        )

    def scaled(self, pct: int) -> TokenPrices:
        """Return every price times a percent, rounded down (a cache hit's prices)."""
        return TokenPrices(**{name: getattr(self, name) * pct // 100 for name in PRICE_FIELDS})

    def as_json(self) -> dict[str, int]:
        """Return the prices by field name, as records and the tenant API show them."""
        return {name: getattr(self, name) for name in PRICE_FIELDS}


PRICE_FIELDS = tuple(f.name for f in fields(TokenPrices))
# The prices an operator may leave unset (the input price then): null columns, optional JSON.
UNSET_IS_INPUT_PRICE = ("cached_input_micro_per_mtok", "cache_write_micro_per_mtok")


def _or(price: int | None, default: int) -> int:
    return default if price is None else price


def bandwidth_charge_micro(*, total_bytes: int, micro_per_gb: int) -> int:
    """Return the bandwidth charge: ceil(bytes x rate / 10^9); a rate of 0 disables it."""
    if micro_per_gb <= 0 or total_bytes <= 0:
        return 0
    return ceil_div(total_bytes * micro_per_gb, BYTES_PER_GB)


def spend_micro(*, cost_micro: int, bandwidth_micro: int) -> int:
    """Return what requests cost their tenant, the spend budgets count: the provider cost
    plus the bandwidth charge."""
    return cost_micro + bandwidth_micro


def with_margin_micro(amount_micro: int, *, margin_pct: int) -> int:
    """Return an amount times a safety margin given in percent (120 = x1.2), rounded up."""
    return ceil_div(amount_micro * margin_pct, 100)


def gateway_rate_micro_per_gb(*, price_micro_per_gb: int, markup_bp: int) -> int:
    """Return the group rate floor(price / markup), markup in basis points (12500 = 1.25x)."""
    return price_micro_per_gb * 10_000 // max(markup_bp, 1)


def prompt_tokens_bound(*, prompt_bytes: int, messages: int) -> int:
    """Return an upper bound on prompt tokens: a BPE token covers at least one byte."""
    return prompt_bytes + 8 * messages + 8


MICRO_PER_USD = 1_000_000
MICRO_PER_CENT = 10_000


def usd_places(micro: int) -> int:
    """Return how many decimals `format_usd` shows for an amount: 2 (cents), or up to 6 for
    a non-zero amount under a cent (its every digit)."""
    size = abs(int(micro))
    if 0 < size < MICRO_PER_CENT:
        return len(f"{size:06d}".rstrip("0"))
    return 2


def finest_places(amounts: Iterable[int | None]) -> int:
    """Return the precision amounts read together share: the most decimals any of them shows
    (`usd_places`), 2 at least. A balance beside sub-cent amounts takes it, so it visibly
    moves by them instead of looking frozen at cents."""
    return max((usd_places(a) for a in amounts if a is not None), default=2)


def format_usd(micro: int, *, places: int | None = None) -> str:
    """Micro-USD as a person reads dollars: cents, and more digits only under a cent.

    1_234_567_890 -> "$1,234.57", 2_520 -> "$0.00252", 0 -> "$0.00", -5_000 -> "-$0.005".
    With `places` (2 to 6, from `finest_places`), exactly that many decimals, so a column
    reads at one precision: 99_999_994 at 6 -> "$99.999994", 105_000_000 at 6 ->
    "$105.000000". Rounding is half away from zero; `format_usd_exact` rounds nothing.
    """
    sign = "-" if micro < 0 else ""
    size = abs(int(micro))
    if places is None:
        if 0 < size < MICRO_PER_CENT:
            return f"{sign}$0.{size:06d}".rstrip("0")
        places = 2
    step = 10 ** (6 - places)
    units = (size + step // 2) // step  # in 10^-places dollars
    whole, fraction = divmod(units, 10**places)
    sign = sign if units else ""  # no "-$0.00": what rounds to nothing has no sign
    return f"{sign}${whole:,}.{fraction:0{places}d}"


def format_usd_exact(micro: int) -> str:
    """Micro-USD in dollars to the last digit that is not zero, cents at least:
    99_989_770 -> "$99.98977", 2_520 -> "$0.00252", 5_000_000 -> "$5.00"."""
    sign = "-" if micro < 0 else ""
    dollars, rest = divmod(abs(int(micro)), MICRO_PER_USD)
    decimals = f"{rest:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${dollars:,}.{decimals}"


# The most one typed amount may be: a billion dollars, far inside a bigint of micro-USD.
MAX_TYPED_MICRO = 1_000_000_000 * MICRO_PER_USD


class AmountInvalid(ValueError):
    """A typed dollar amount that is not one: says what was wrong in words."""


def parse_usd(text: str, *, allow_negative: bool = False) -> int:
    """A dollar amount a person typed, in micro-USD: "5" and "$5.00" -> 5_000_000.

    Takes an optional "$" and thousands commas; at most six decimals (a micro-dollar), so
    nothing typed is ever rounded. Refuses anything else with `AmountInvalid`.
    """
    cleaned = (text or "").strip().replace(",", "").replace(" ", "")
    negative = cleaned.startswith("-")
    cleaned = cleaned.removeprefix("-").removeprefix("$")
    whole, dot, fraction = cleaned.partition(".")
    if not whole and not fraction:
        raise AmountInvalid("Type an amount in dollars, such as 5.00.")
    if not _digits(whole or "0") or (dot and not _digits(fraction or "0")):
        raise AmountInvalid(f"{text.strip()!r} is not an amount in dollars, such as 5.00.")
    if len(fraction) > 6:
        raise AmountInvalid("An amount has at most six decimals (one micro-dollar).")
    micro = int(whole or "0") * MICRO_PER_USD + int(fraction.ljust(6, "0"))
    if micro > MAX_TYPED_MICRO:
        raise AmountInvalid(f"An amount is at most {format_usd(MAX_TYPED_MICRO)}.")
    if negative and not allow_negative:
        raise AmountInvalid("The amount must be positive.")
    return -micro if negative else micro


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()
