"""The Charts page: the vendored Chart.js, exact micro-USD figures split by model, key and who
paid, the empty window, and the page on a phone.

In-process tests read the JSON the page embeds (json_script) and its tables; browser tests
drive Debian's Chromium through Playwright against a real gateway process (the `stack`), the
stub vendor behind it, and keep screenshots under var/test-artifacts/dashboard/charts.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounts.models import ApiKey, Group
from accounts.services import api_key_create
from core.money import format_usd, format_usd_exact
from tests.dashboard.test_pages import page, signed_in
from tests.support.browser import ARTIFACTS as BROWSER_ARTIFACTS
from tests.support.browser import PHONE, open_page, requires_chromium
from tests.support.tenants import Tenant, make_tenant
from tests.support.usage import journal_row, store, usage_rows

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "dashboard/static/dashboard"
VENDOR = STATIC / "vendor"
TEMPLATE = ROOT / "templates/dashboard/charts.html"
ARTIFACTS = BROWSER_ARTIFACTS / "dashboard" / "charts"
PER_BYTE = 1_000_000_000  # micro-USD per GB: the bandwidth charge is the byte count

# Where the mouse is over a bar, in page coordinates (the canvas scrolled into view first).
BAR_POINT = """([slug, dataset, index]) => {
  const chart = window.TollgateCharts.drawn[slug];
  const {x, y} = chart.getDatasetMeta(dataset).data[index].getCenterPoint();
  const box = chart.canvas.getBoundingClientRect();
  return {x: box.left + x, y: box.top + y};
}"""
# What the chart's tooltip says now: the text Chart.js draws on the canvas.
TOOLTIP = """(slug) => {
  const tip = window.TollgateCharts.drawn[slug].tooltip;
  return {
    shown: tip.opacity > 0,
    title: tip.title,
    lines: tip.body.flatMap((item) => [...item.before, ...item.lines, ...item.after]),
    footer: tip.footer,
  };
}"""


def chart_data(html: str) -> dict[str, dict]:
    """Return the charts the page embeds for charts.js, by slug."""
    found = re.search(r'<script id="chart-data" type="application/json">(.*?)</script>', html)
    assert found, "the page embeds no chart data"
    return {chart["slug"]: chart for chart in json.loads(found.group(1))["charts"]}


def values(chart: dict) -> dict[str, list[int]]:
    return {series["name"]: series["values"] for series in chart["series"]}


def hover(tab, slug: str, *, dataset: int = 0, index: int = 0) -> dict:
    """Move the real mouse over a bar; return the tooltip Chart.js shows for it."""
    tab.locator(f"canvas[data-chart={slug}]").scroll_into_view_if_needed()
    point = tab.evaluate(BAR_POINT, [slug, dataset, index])
    tab.mouse.move(point["x"], point["y"])
    tab.wait_for_function(f"() => window.TollgateCharts.drawn[{slug!r}].tooltip.opacity > 0")
    return tab.evaluate(TOOLTIP, slug)


def open_charts(browser, stack, tenant: Tenant, name: str, *, viewport=None, days: int = 30):
    """Sign the tenant's owner in and open the Charts page; return the tab, charts drawn."""
    from tests.dashboard.test_browser import sign_in

    tab = open_page(browser, ARTIFACTS / name, **({"viewport": viewport} if viewport else {}))
    errors: list[str] = []  # what went wrong loading and drawing: none expected
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    tab.script_errors = errors
    sign_in(tab, stack, tenant)
    tab.goto(f"{stack.url}/dashboard/{tenant.account_id}/charts/?days={days}")
    tab.wait_for_function("() => Object.keys(window.TollgateCharts?.drawn ?? {}).length > 0")
    return tab


# ------------------------------------------------------------------ the vendored library


def test_vendored_chart_js_is_the_file_vendored_md_records():
    record = (VENDOR / "VENDORED.md").read_text()
    [name] = re.findall(r"\| File \| `([^`]+)`", record)
    [sha256] = re.findall(r"\| File sha256 \| `([0-9a-f]{64})`", record)
    [version] = re.findall(r"\| Version \| (\S+) ", record)

    script = VENDOR / name
    assert hashlib.sha256(script.read_bytes()).hexdigest() == sha256
    assert script.read_text().startswith(f"/*!\n * Chart.js v{version}\n")
    assert "MIT License" in (VENDOR / "chart.js-LICENSE.md").read_text()
    assert f"{{% static 'dashboard/vendor/{name}' %}}" in TEMPLATE.read_text()


def test_collectstatic_copies_the_chart_scripts(tmp_path, settings):
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)

    for name in ("charts.js", "charts.css", "vendor/chart-4.6.1.umd.min.js"):
        assert (tmp_path / "dashboard" / name).read_bytes() == (STATIC / name).read_bytes(), name


# ------------------------------------------------------------------ in-process: the figures


@pytest.mark.django_db
@pytest.mark.parametrize("days", [7, 30, 90])
def test_a_window_without_traffic_says_so_instead_of_drawing(days):
    tenant = make_tenant()
    old = timezone.now() - timedelta(days=days + 1)  # just outside the window
    store(journal_row(group_id=tenant.group_id, account_id=tenant.account_id, created_at=old))

    html = signed_in(tenant).get(page(tenant, f"charts/?days={days}")).content.decode()

    assert f'<p class="empty" id="charts-empty">No spend in the last {days} days.</p>' in html
    assert "<canvas" not in html and "chart-data" not in html and "max $" not in html


@pytest.mark.django_db
def test_free_traffic_says_no_spend_and_draws_its_tokens():
    tenant = make_tenant()  # no bandwidth rate: a team-key request costs the tenant nothing
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            served_by="team",
            byok_tokens_in=5,
            byok_tokens_out=6,
        )
    )

    html = signed_in(tenant).get(page(tenant, "charts/")).content.decode()

    assert '<p class="empty">No spend in the last 30 days.</p>' in html
    assert '<p class="empty">No spend on any model in the last 30 days.</p>' in html
    drawn = chart_data(html)
    assert sorted(drawn) == ["tokens-day"]  # the spend charts are sentences, not empty axes
    assert values(drawn["tokens-day"])["Team keys"][-1] == 11
    assert 'data-chart="tokens-day" role="img"' in html


@pytest.mark.django_db
def test_spend_by_key_names_each_key_and_says_which_had_none():
    tenant = make_tenant()
    group = Group.objects.get(pk=tenant.group_id)
    batch, _ = api_key_create(group=group, name="batch jobs")
    unnamed, _ = api_key_create(group=group)
    gone, _ = api_key_create(group=group, name="gone")
    gone_id = gone.pk
    ApiKey.objects.filter(pk=gone_id).delete()
    other = make_tenant()  # another account's key is never named here

    def row(key_id: int | None, cost: int) -> dict:
        return journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=key_id,
            provider_cost_micro=cost,
        )

    store(
        row(tenant.api_key_id, 1_234_567),
        row(batch.pk, 30_000),
        row(batch.pk, 5_000),
        row(unnamed.pk, 7),
        row(None, 2_500),
        row(gone_id, 10),
        row(other.api_key_id, 3),
    )

    html = signed_in(tenant).get(page(tenant, "charts/")).content.decode()

    spend_by_key = chart_data(html)["spend-key"]
    assert spend_by_key["labels"] == [
        "default",
        "batch jobs",
        "internal (no key)",
        f"deleted key #{gone_id}",
        unnamed.prefix,
        f"deleted key #{other.api_key_id}",
    ]
    assert spend_by_key["series"] == [
        {"key": "total", "name": "Spend", "values": [1_234_567, 35_000, 2_500, 10, 7, 3]}
    ]
    table = html.split('id="chart-spend-key"')[1].split("</table>")[0]
    cells = re.findall(r'<th scope="row">([^<]+)</th><td class="num">(.+?)</td>', table)
    assert cells[:3] == [
        ("default", '<span title="$1.234567">$1.23</span>'),
        ("batch jobs", '<span title="$0.035">$0.04</span>'),  # cents rounded half up
        ("internal (no key)", "$0.0025"),
    ]
    label = re.search(r'data-chart="spend-key" role="img" aria-label="([^"]+)"', html).group(1)
    assert label == (
        "Spend by key, last 30 days: default $1.23, batch jobs $0.04, "
        "internal (no key) $0.0025, and 3 more."
    )


@pytest.mark.django_db
def test_spend_per_day_is_split_by_who_paid_each_day():
    tenant = make_tenant()
    now = timezone.now()

    def row(days_ago: int, served_by: str, cost: int, bandwidth: int = 0) -> dict:
        return journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            created_at=now - timedelta(days=days_ago),
            served_by=served_by,
            provider_cost_micro=cost,
            bandwidth_charge_micro=bandwidth,
        )

    store(
        row(2, "platform", 100),
        row(2, "team", 0, bandwidth=5),
        row(1, "team", 0, bandwidth=7),
        row(0, "platform", 40, bandwidth=1),
        row(0, "", 0, bandwidth=3),  # served by no one (an upstream error), bytes billed
    )

    html = signed_in(tenant).get(page(tenant, "charts/?days=7")).content.decode()

    charts = chart_data(html)
    assert values(charts["spend-day"]) == {
        "Platform": [0, 0, 0, 0, 100, 0, 41],
        "Team keys": [0, 0, 0, 0, 5, 7, 0],
        "Not served": [0, 0, 0, 0, 0, 0, 3],
    }
    assert charts["spend-payer"]["labels"] == ["Platform", "Team keys", "Not served"]
    assert values(charts["spend-payer"]) == {"Spend": [141, 12, 3]}
    assert charts["spend-payer"]["bar_keys"] == ["platform", "team", ""]


# ------------------------------------------------------------------ in the browser

browser_test = requires_chromium


@browser_test
def test_spend_is_split_by_who_paid_platform_or_team_key(stack, browser):
    from tests.byok.helpers import team_keys

    tenant = stack.tenant()
    Group.objects.filter(pk=tenant.group_id).update(bandwidth_micro_usd_per_gb=PER_BYTE)
    stack.gateway.reload()
    client = stack.openai(tenant)
    ask = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "who pays?"}]}
    client.chat.completions.create(**ask)  # no team key yet: the platform pays
    team_keys(stack, tenant, "stub-openai", ["sk-team-charts-1"])  # fallback off
    client.chat.completions.create(**ask)

    assert [call["key"] for call in stack.stub.vendor_calls()][-1] == "sk-team-charts-1"
    rows = usage_rows(group_id=tenant.group_id, expect=2)
    spend = {r.served_by: r.provider_cost_micro + r.bandwidth_charge_micro for r in rows}
    assert spend["platform"] > spend["team"] > 0  # team: the bandwidth charge only

    tab = open_charts(browser, stack, tenant, "who-paid")
    tab.shot("1-charts")
    drawn = chart_data(tab.content())
    assert values(drawn["spend-payer"]) == {"Spend": [spend["platform"], spend["team"]]}
    assert drawn["spend-payer"]["labels"] == ["Platform", "Team keys"]
    today = values(drawn["spend-day"])
    assert (today["Platform"][-1], today["Team keys"][-1]) == (spend["platform"], spend["team"])
    assert sum(today["Platform"]) + sum(today["Team keys"]) == sum(spend.values())

    team = hover(tab, "spend-payer", index=1)
    assert team["title"] == ["Team keys"]
    assert team["lines"] == [f"Spend: {format_usd(spend['team'])}"] + (
        [f"  exactly {format_usd_exact(spend['team'])}"]
        if format_usd(spend["team"]) != format_usd_exact(spend["team"])
        else []
    )
    day = hover(tab, "spend-day", index=29)
    tab.shot("2-day-tooltip")
    assert day["lines"][0] == f"Platform: {format_usd(spend['platform'])}"
    assert f"Team keys: {format_usd(spend['team'])}" in day["lines"]
    assert day["footer"] == [f"Total: {format_usd(sum(spend.values()))}"]
    assert tab.script_errors == []
    tab.context.close()


@browser_test
def test_the_page_fits_a_phone_without_sideways_scroll(stack, browser):
    tenant = stack.tenant()
    group = Group.objects.get(pk=tenant.group_id)
    keys = [api_key_create(group=group, name=f"service {n} nightly batch")[0] for n in range(4)]
    long_model = "anthropic/claude-3-5-sonnet-20241022-with-a-very-long-deployment-name"
    rows = [
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=keys[n % 4].pk,
            model_served=long_model if n == 0 else f"model-{n}",
            provider_cost_micro=1_000_000 * (12 - n) + 3,
            created_at=timezone.now() - timedelta(days=n),
            tokens_in=1_000 * n,
            tokens_out=12_345,
        )
        for n in range(12)
    ]
    store(*rows)

    tab = open_charts(browser, stack, tenant, "phone", viewport=PHONE)
    tab.shot("1-phone")
    assert tab.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    for canvas in tab.locator("canvas[data-chart]").all():
        box = canvas.bounding_box()
        assert box["width"] > 250 and box["height"] > 60, canvas.get_attribute("data-chart")
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    # Twelve models: nine bars and one for the smallest three; the long name whole in its tooltip.
    by_model = chart_data(tab.content())["spend-model"]
    assert len(by_model["labels"]) == 10 and by_model["labels"][-1] == "3 others"
    top = hover(tab, "spend-model", index=by_model["labels"].index(long_model))
    assert top["title"] == [long_model]
    tab.locator("#chart-spend-model summary").click()
    tab.shot("2-phone-numbers-open")
    for card in tab.locator(".chart-card").all():  # each at full size, to look at
        card.screenshot(path=str(ARTIFACTS / "phone" / f"card-{card.get_attribute('id')}.png"))
    assert tab.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    assert tab.script_errors == []
    tab.context.close()


@browser_test
def test_the_js_dollar_format_reads_like_format_usd(stack, browser):
    tab = open_page(browser, ARTIFACTS / "format")
    tab.goto(f"{stack.url}/static/dashboard/charts.js")  # same origin, nothing else loaded
    tab.set_content("<!doctype html><title>format</title>")
    tab.add_script_tag(url=f"{stack.url}/static/dashboard/charts.js")
    amounts = [0, 1, 9, 10, 2_520, 9_999, 10_000, 14_999, 15_000, 99_989_770, 5_000_000]
    amounts += [1_234_567_890, 123_456_789_012_345, -5_000, -1]
    shown = tab.evaluate(
        "(xs) => xs.map((x) => [TollgateCharts.formatUsd(x), TollgateCharts.formatUsdExact(x)])",
        amounts,
    )
    assert shown == [[format_usd(x), format_usd_exact(x)] for x in amounts]
    tab.context.close()
