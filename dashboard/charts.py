"""The Charts page's figures: usage totals shaped into the series the browser draws.

The page embeds `ChartsPage.payload()` with `json_script`; dashboard/static/dashboard/charts.js
draws it with the vendored Chart.js. Every value is an integer (micro-USD for money, a count
for tokens) and is formatted only for display, so the numbers a chart, its tooltip and its
table show are the usage totals to the micro-dollar. The figures come from
usage.selectors.usage_totals (rollup-backed), never from the rows one by one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from accounts.models import Account, ApiKey
from core.money import format_usd
from dashboard.selectors import chart_window, every_day, spend_micro
from dashboard.templatetags.money import count, usd
from providers.models import ProviderModel
from usage.models import ServedBy
from usage.selectors import TOTALS, usage_totals, usage_zero_totals
from usage.tags import tag_totals

MONEY = "usd"  # values in micro-USD
TOKENS = "tokens"
PER_DAY = "days"  # vertical bars, one a day, stacked by who paid
RANKING = "ranking"  # horizontal bars, largest first: long names read across
RANKED_BARS = 10  # a ranking draws this many bars, the rest summed as one
SUMMARY_ITEMS = 3  # a ranking's screen-reader summary names this many

# Who paid the vendor: the platform (billed to the wallet) or the tenant's own team key.
# A request no attempt served (refused, failed) has no payer; its spend is bandwidth only.
PAYERS = (
    (ServedBy.PLATFORM.value, "Platform"),
    (ServedBy.TEAM.value, "Team keys"),
    ("", "Not served"),
)
PAYER_KEYS = {name: payer for payer, name in PAYERS}
NO_KEY = "internal (no key)"
WEB = "(web)"  # a web action has no model


@dataclass(frozen=True)
class Series:
    key: str  # what charts.js colours it by: a payer, or "total"
    name: str
    values: list[int]


@dataclass(frozen=True)
class TableRow:
    label: str
    cells: list[str]  # one per series, formatted for display
    total: str


@dataclass(frozen=True)
class Chart:
    """One chart: its labels, its series (stacked when several) and how to say it in words."""

    slug: str  # the canvas's data-chart and the element ids
    title: str
    unit: str  # MONEY or TOKENS
    layout: str  # PER_DAY or RANKING
    heading: str  # what a label is: the table's first column
    labels: list[str]
    series: list[Series]
    empty: str  # said instead of drawing when every value is 0
    days: int
    bar_keys: list[str] | None = None  # what colours each bar (a payer), else its series

    def totals(self) -> list[int]:
        return [sum(values) for values in zip(*(s.values for s in self.series), strict=True)]

    @property
    def is_empty(self) -> bool:
        return not any(any(s.values) for s in self.series)

    def show(self, value: int) -> str:
        return format_usd(value) if self.unit == MONEY else f"{value:,} tokens"

    @property
    def summary(self) -> str:
        """Return what the chart shows in a sentence: the canvas's aria-label."""
        if self.is_empty:
            return self.empty
        window = f"last {self.days} days"
        totals = self.totals()
        if self.layout == PER_DAY:
            parts = ", ".join(
                f"{s.name.lower()} {self.show(sum(s.values))}" for s in self.series if any(s.values)
            )
            top = max(range(len(totals)), key=totals.__getitem__)
            return (
                f"{self.title}, {window}: {self.show(sum(totals))} in all ({parts}); "
                f"most on {self.labels[top]}: {self.show(totals[top])}."
            )
        named = [f"{label} {self.show(v)}" for label, v in zip(self.labels, totals, strict=True)]
        more = len(named) - SUMMARY_ITEMS
        tail = f", and {more} more" if more > 0 else ""
        return f"{self.title}, {window}: {', '.join(named[:SUMMARY_ITEMS])}{tail}."

    def table(self) -> list[TableRow]:
        """Return the chart's numbers as table rows, for screen readers and to copy."""
        fmt = usd if self.unit == MONEY else count
        rows = []
        for i, label in enumerate(self.labels):
            values = [s.values[i] for s in self.series]
            rows.append(TableRow(label, [fmt(v) for v in values], fmt(sum(values))))
        return rows

    def as_json(self) -> dict:
        return {
            "slug": self.slug,
            "title": self.title,
            "unit": self.unit,
            "layout": self.layout,
            "labels": self.labels,
            "series": [{"key": s.key, "name": s.name, "values": s.values} for s in self.series],
            "bar_keys": self.bar_keys,
        }


@dataclass(frozen=True)
class ChartsPage:
    days: int
    requests: int  # in the window: none means one sentence instead of the charts
    charts: list[Chart]
    per_model: list[dict]  # the per-model table: usage totals with spend_micro

    @property
    def empty(self) -> str:
        return f"No spend in the last {self.days} days."

    def payload(self) -> dict:
        """Return what the page embeds for charts.js (json_script): the charts worth drawing."""
        return {"days": self.days, "charts": [c.as_json() for c in self.charts if not c.is_empty]}


def platform_tokens(row: dict) -> int:
    return row["tokens_in"] + row["tokens_out"]


def team_tokens(row: dict) -> int:
    return row["byok_tokens_in"] + row["byok_tokens_out"]


def charts_page(*, account: Account, days: int, now: datetime | None = None) -> ChartsPage:
    """Return the account's charts over the last `days` UTC days (today included)."""
    start = chart_window(days=days, now=now)
    accounts = [account.pk]
    per_day = every_day(
        usage_totals(accounts=accounts, by="day", start=start), start=start, days=days
    )
    per_model = group_unknown(usage_totals(accounts=accounts, by="model", start=start))
    per_key = usage_totals(accounts=accounts, by="api_key_id", start=start)
    per_payer = {
        row["served_by"]: spend_micro(row)
        for row in usage_totals(accounts=accounts, by="served_by", start=start)
    }
    labels = [row["day"].isoformat() for row in per_day]
    by_payer = ranking(
        slug="spend-payer",
        title="Platform vs team keys",
        heading="Paid by",
        named=((name, per_payer.get(payer, 0)) for payer, name in PAYERS),
        empty=f"No spend in the last {days} days.",
        days=days,
        ranked=False,  # two or three payers, always in PAYERS' order
    )
    # Each payer in its own colour, the one it has in the per-day charts.
    by_payer = replace(by_payer, bar_keys=[PAYER_KEYS[label] for label in by_payer.labels])
    charts = [
        Chart(
            slug="spend-day",
            title="Spend per day",
            unit=MONEY,
            layout=PER_DAY,
            heading="Day (UTC)",
            labels=labels,
            series=spend_per_day_by_payer(
                accounts=accounts, start=start, per_day=per_day, by_payer=per_payer
            ),
            empty=f"No spend in the last {days} days.",
            days=days,
        ),
        Chart(
            slug="tokens-day",
            title="Tokens per day",
            unit=TOKENS,
            layout=PER_DAY,
            heading="Day (UTC)",
            labels=labels,
            series=[
                Series("platform", "Platform", [platform_tokens(r) for r in per_day]),
                Series("team", "Team keys", [team_tokens(r) for r in per_day]),
            ],
            empty=f"No tokens in the last {days} days.",
            days=days,
        ),
        ranking(
            slug="spend-model",
            title="Spend by model",
            heading="Model",
            named=((row["model"] or WEB, spend_micro(row)) for row in per_model),
            empty=f"No spend on any model in the last {days} days.",
            days=days,
        ),
        ranking(
            slug="spend-key",
            title="Spend by key",
            heading="Key",
            named=zip(
                key_names(account=account, key_ids=[row["api_key_id"] for row in per_key]),
                (spend_micro(row) for row in per_key),
                strict=True,
            ),
            empty=f"No spend by any key in the last {days} days.",
            days=days,
        ),
        # From the tag rollups: a request with several tags is under each of them.
        ranking(
            slug="spend-tag",
            title="Spend by tag",
            heading="Tag",
            named=(
                (row["tag"], row["spend_micro"])
                for row in tag_totals(accounts=accounts, start=start)
            ),
            empty=f"No spend by any tagged request in the last {days} days.",
            days=days,
        ),
        by_payer,
    ]
    return ChartsPage(
        days=days,
        requests=sum(row["requests"] for row in per_day),
        charts=charts,
        per_model=[{**row, "spend_micro": spend_micro(row)} for row in per_model],
    )


def known_models() -> frozenset[str]:
    """Return every name the gateway serves a model by (enabled profiles): canonical names,
    aliases, and each as "profile/name"."""
    known: set[str] = set()
    rows = ProviderModel.objects.filter(profile__enabled=True).values_list(
        "profile__name", "name", "aliases"
    )
    for profile, name, aliases in rows:
        for each in (name, *(a for a in aliases or () if isinstance(a, str))):
            known |= {each, f"{profile}/{each}"}
    return frozenset(known)


def group_unknown(per_model: list[dict], known: frozenset[str] | None = None) -> list[dict]:
    """Return the per-model totals with the names no model answers to (a misspelt "gpt-4o-mni",
    refused with LM-2001) summed into one last row, "unknown models (N requests)": a typo is
    not a model, and a row each would bury the real ones. Its `names` lists them.

    Unknown: every request of the name failed and no enabled profile has a model or alias by
    it. A name that served a request was a model then, even if no profile offers it now.
    """
    known = known_models() if known is None else known
    models, unknown, names = [], usage_zero_totals(), []
    for row in per_model:
        name = row["model"]  # "" is a web action's: not a model
        if not name or name in known or row["errors"] < row["requests"]:
            models.append(row)
            continue
        names.append(name)
        for total in TOTALS:
            unknown[total] += row[total]
    if names:
        asked = unknown["requests"]
        label = f"unknown models ({asked:,} request{'s' * (asked != 1)})"
        models.append({**unknown, "model": label, "names": names, "unknown": True})
    return models


def spend_per_day_by_payer(
    *, accounts: Sequence[int], start: datetime, per_day: list[dict], by_payer: dict[str, int]
) -> list[Series]:
    """Return each payer's spend per day of the window ("Not served" only if it cost something).

    `per_day` is the window's totals a day, `by_payer` its spend by payer: when one payer
    spent everything, each day's spend is theirs; otherwise one per-day read per payer that
    spent (rollups filtered by who paid: at most three reads, whatever the window).
    """
    daily = [spend_micro(row) for row in per_day]
    spent: dict[str, list[int]] = {payer: [0] * len(daily) for payer, _ in PAYERS}
    paying = [payer for payer, _ in PAYERS if by_payer.get(payer)]
    if len(paying) == 1:
        spent[paying[0]] = daily
    else:
        for payer in paying:
            rows = usage_totals(accounts=accounts, by="day", start=start, served_by=payer)
            spent[payer] = [
                spend_micro(row) for row in every_day(rows, start=start, days=len(daily))
            ]
    return [
        Series(payer, name, spent[payer])
        for payer, name in PAYERS
        if any(spent[payer]) or payer != ""
    ]


def key_names(*, account: Account, key_ids: Sequence[int]) -> list[str]:
    """Return a name for each key id: the key's name (its prefix when two share a name or it
    has none), NO_KEY for 0 (internal calls), "deleted key" for one that is gone."""
    keys = {
        key.pk: key
        for key in ApiKey.objects.filter(group__account=account, pk__in=[k for k in key_ids if k])
    }
    shared = Counter(key.name for key in keys.values())
    names = []
    for key_id in key_ids:
        key = keys.get(key_id)
        if not key_id:
            names.append(NO_KEY)
        elif key is None:
            names.append(f"deleted key #{key_id}")
        elif not key.name:
            names.append(key.prefix)
        elif shared[key.name] > 1:
            names.append(f"{key.name} ({key.prefix})")
        else:
            names.append(key.name)
    return names


def ranking(
    *,
    slug: str,
    title: str,
    heading: str,
    named: Iterable[tuple[str, int]],
    empty: str,
    days: int,
    ranked: bool = True,
) -> Chart:
    """Return a horizontal bar chart of (label, micro-USD) pairs: those above 0, largest first,
    past RANKED_BARS the rest summed into one bar so the chart stays readable."""
    pairs = [(label, value) for label, value in named if value]
    if ranked:
        pairs.sort(key=lambda pair: (-pair[1], pair[0]))
    if len(pairs) > RANKED_BARS:
        rest = pairs[RANKED_BARS - 1 :]
        pairs = [*pairs[: RANKED_BARS - 1], (f"{len(rest)} others", sum(v for _, v in rest))]
    return Chart(
        slug=slug,
        title=title,
        unit=MONEY,
        layout=RANKING,
        heading=heading,
        labels=[label for label, _ in pairs],
        series=[Series("total", "Spend", [value for _, value in pairs])],
        empty=empty,
        days=days,
    )
