"""Web units on the books: a web request's pages, rendered pages and queries reach its usage
row through the journal, sum into the window's event, and show in the tenant API, the CSV
export and the admin; a journal entry written before the units existed still stores."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, datetime, timedelta

import orjson
import pytest
import redis
from django.conf import settings
from jsonschema import ValidationError

from tests.support.services import requires_redis
from tests.support.tenants import client_for, make_tenant
from tests.support.usage import after_windows, journal_row, store, streamed_body
from tests.support.waits import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WEB_UNITS = ("web_pages", "web_rendered_pages", "web_queries")
ACTIONS = (
    "web.scrape",
    "web.search",
    "web.crawl",
    "internal.scrape",
    "internal.search",
    "internal.crawl",
)
DAY1 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
DAY2 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def web_row(tenant, *, endpoint: str = "web.scrape", **fields) -> dict:
    """A web request's journal form: no model, a web provider, units instead of tokens."""
    row = {
        "endpoint": endpoint,
        "model_requested": "",
        "model_served": "",
        "provider": "web-direct",
        **fields,
    }
    return journal_row(
        group_id=tenant.group_id,
        account_id=tenant.account_id,
        api_key_id=tenant.api_key_id,
        **row,
    )


def journal_and_drain(*raw_entries: bytes) -> None:
    """Journal entries to the Redis stream as a gateway does, then drain it as the task does."""
    from usage.writer import JOURNAL, drain_journal_sync

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        for raw in raw_entries:
            client.xadd(JOURNAL, {"row": raw})
    finally:
        client.close()
    drain_journal_sync(settings.REDIS_URL)


def stored(request_ids: list[str]) -> dict:
    from usage.models import UsageLog

    def rows():
        found = {r.request_id: r for r in UsageLog.objects.filter(request_id__in=request_ids)}
        return found if len(found) == len(request_ids) else None

    # Another test's gateway in this session may read the stream first: it stores them too.
    return wait_until(rows, timeout_s=15, what=f"{len(request_ids)} journaled rows stored")


def window_events(*tenants) -> dict:
    from usage.models import UsageEvent

    return {
        e.group_id: e for e in UsageEvent.objects.filter(group_id__in=[t.group_id for t in tenants])
    }


def age_rows(by: timedelta, *tenants) -> None:
    from django.db.models import F

    from usage.models import UsageLog

    UsageLog.objects.filter(group_id__in=[t.group_id for t in tenants]).update(
        stored_at=F("stored_at") - by, created_at=F("created_at") - by
    )


# ---------------------------------------------------------------- the row


@requires_redis
def test_a_journaled_web_record_is_stored_with_its_units_exactly():
    from core.shared_state import SharedState
    from core.usage_record import UsageRecord
    from usage.writer import UsageWriter

    tenant = make_tenant()
    rows = [
        web_row(
            tenant,
            request_id=f"scrape-{uuid.uuid4().hex}",
            endpoint="web.scrape",
            provider="web-render",
            web_pages=1,
            web_rendered_pages=2,
            provider_cost_micro=2_100,
            bytes_in=140,
            bytes_out=52_000,
        ),
        web_row(
            tenant,
            request_id=f"search-{uuid.uuid4().hex}",
            endpoint="internal.search",
            provider="web-search",
            served_by="team",
            web_queries=3,
            bytes_in=90,
            bytes_out=4_100,
        ),
    ]
    writer = UsageWriter(SharedState())
    # The gateway's own command: XADD <journal> * row <record JSON>.
    entries = [writer.journal_command(UsageRecord.from_dict(row))[-1] for row in rows]

    journal_and_drain(*entries)

    by_id = stored([row["request_id"] for row in rows])
    fields = (
        "endpoint",
        "provider",
        "served_by",
        *WEB_UNITS,
        "provider_cost_micro",
        "bytes_in",
        "bytes_out",
        "tokens_in",
        "byok_tokens_in",
    )
    assert [tuple(getattr(by_id[row["request_id"]], f) for f in fields) for row in rows] == [
        ("web.scrape", "web-render", "platform", 1, 2, 0, 2_100, 140, 52_000, 0, 0),
        ("internal.search", "web-search", "team", 0, 0, 3, 0, 90, 4_100, 0, 0),
    ]


@requires_redis
def test_a_journal_entry_from_before_the_web_units_stores_with_none():
    from core.usage_record import UsageRecord

    tenant = make_tenant()
    old = journal_row(
        group_id=tenant.group_id,
        account_id=tenant.account_id,
        request_id=f"old-{uuid.uuid4().hex}",
        tokens_in=7,
        tokens_out=3,
        provider_cost_micro=4,
    )
    assert not set(WEB_UNITS) & set(old)  # the shape a gateway of the release before wrote
    raw = orjson.dumps(old)

    record = UsageRecord.from_json(raw)
    journal_and_drain(raw)

    assert tuple(getattr(record, unit) for unit in WEB_UNITS) == (0, 0, 0)
    row = stored([old["request_id"]])[old["request_id"]]
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (7, 3, 4)
    assert tuple(getattr(row, unit) for unit in WEB_UNITS) == (0, 0, 0)


def test_every_web_action_fits_the_route_column_whole():
    from usage.models import UsageLog

    tenant = make_tenant()
    store(
        *[
            web_row(tenant, request_id=f"{action}-{tenant.group_id}", endpoint=action)
            for action in ACTIONS
        ]
    )

    assert sorted(
        UsageLog.objects.filter(group_id=tenant.group_id).values_list("endpoint", flat=True)
    ) == sorted(ACTIONS)


# ---------------------------------------------------------------- events


def test_the_window_event_sums_web_units_beside_tokens_and_validates():
    from usage.services import event_schema_validator, usage_events_flush

    tenant = make_tenant()
    store(
        web_row(tenant, web_pages=4, provider_cost_micro=400, bytes_in=100, bytes_out=9_000),
        web_row(
            tenant,
            endpoint="web.crawl",
            web_pages=10,
            web_rendered_pages=3,
            provider_cost_micro=1_300,
            bytes_in=120,
            bytes_out=30_000,
        ),
        web_row(tenant, endpoint="web.search", web_queries=2, provider_cost_micro=50),
        # A chat request in the same window: its tokens and the web units sum side by side.
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            tokens_in=11,
            tokens_out=5,
            provider_cost_micro=6,
        ),
    )
    age_rows(timedelta(hours=1), tenant)

    usage_events_flush(now=after_windows())

    event = window_events(tenant)[tenant.group_id]
    assert event.payload["requests"] == 4
    assert event.payload["units"] == {
        "tokens_in": 11,
        "tokens_out": 5,
        "provider_cost_micro_usd": 400 + 1_300 + 50 + 6,
        "bytes_in": 220,
        "bytes_out": 39_000,
        "byok_tokens_in": 0,
        "byok_tokens_out": 0,
        "web_pages": 14,
        "web_rendered_pages": 3,
        "web_queries": 2,
        "uncollected_micro_usd": 0,
    }
    event_schema_validator().validate(event.payload)


def test_a_window_of_only_team_served_web_traffic_emits_its_event_at_no_cost():
    from usage.services import event_schema_validator, usage_events_flush

    tenant = make_tenant()
    store(
        web_row(tenant, served_by="team", provider="team-render", web_rendered_pages=5),
        web_row(tenant, served_by="team", endpoint="web.search", web_queries=1),
    )
    age_rows(timedelta(hours=1), tenant)

    usage_events_flush(now=after_windows())

    event = window_events(tenant)[tenant.group_id]
    assert (event.payload["requests"], event.payload["units"]) == (
        2,
        {
            "tokens_in": 0,
            "tokens_out": 0,
            "provider_cost_micro_usd": 0,
            "bytes_in": 0,
            "bytes_out": 0,
            "byok_tokens_in": 0,
            "byok_tokens_out": 0,
            "web_pages": 0,
            "web_rendered_pages": 5,
            "web_queries": 1,
            "uncollected_micro_usd": 0,
        },
    )
    event_schema_validator().validate(event.payload)


def test_the_v1_schema_still_takes_events_written_before_the_web_units_and_no_negative_unit():
    from usage.services import event_schema_validator, usage_events_flush

    tenant = make_tenant()
    store(web_row(tenant, web_pages=2))
    age_rows(timedelta(hours=1), tenant)
    usage_events_flush(now=after_windows())
    payload = window_events(tenant)[tenant.group_id].payload
    before = orjson.loads(orjson.dumps(payload))
    for unit in WEB_UNITS:
        del before["units"][unit]
    negative = orjson.loads(orjson.dumps(payload))
    negative["units"]["web_queries"] = -1
    unknown = orjson.loads(orjson.dumps(payload))
    unknown["units"]["web_minutes"] = 1

    validator = event_schema_validator()
    validator.validate(before)
    for wrong in (negative, unknown):
        with pytest.raises(ValidationError):
            validator.validate(wrong)


# ---------------------------------------------------------------- the tenant API and the admin


@pytest.fixture
def web_usage():
    """My web and chat rows over two days, and another tenant's scrape."""
    mine, theirs = make_tenant(), make_tenant()
    store(
        web_row(
            mine,
            request_id="w-scrape",
            created_at=DAY1,
            web_pages=1,
            provider_cost_micro=100,
        ),
        web_row(
            mine,
            request_id="w-render",
            created_at=DAY1,
            provider="web-render",
            web_rendered_pages=1,
            provider_cost_micro=900,
        ),
        web_row(
            mine,
            request_id="w-crawl",
            created_at=DAY2,
            endpoint="web.crawl",
            web_pages=6,
            web_rendered_pages=2,
            provider_cost_micro=2_400,
        ),
        web_row(
            mine,
            request_id="w-search",
            created_at=DAY2,
            endpoint="internal.search",
            provider="web-search",
            served_by="team",
            web_queries=3,
        ),
        journal_row(
            group_id=mine.group_id,
            account_id=mine.account_id,
            request_id="w-chat",
            created_at=DAY2,
            tokens_in=9,
        ),
        web_row(theirs, request_id="t-scrape", created_at=DAY1, web_pages=50),
    )
    return mine, theirs


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_rows_carry_the_units_and_filter_by_web_route(web_usage):
    mine, theirs = web_usage
    client = client_for(mine)

    rows = results(client.get("/api/usage?route=web.scrape"))
    detail = client.get("/api/usage/requests/w-crawl").json()

    assert [(r["request_id"], r["route"], *(r[u] for u in WEB_UNITS)) for r in rows] == [
        ("w-render", "web.scrape", 0, 1, 0),
        ("w-scrape", "web.scrape", 1, 0, 0),
    ]
    assert [r["request_id"] for r in results(client.get("/api/usage?route=web.crawl"))] == [
        "w-crawl"
    ]
    assert [r["request_id"] for r in results(client.get("/api/usage?route=internal.search"))] == [
        "w-search"
    ]
    assert results(client.get("/api/usage?route=web.search")) == []
    assert [
        r["request_id"] for r in results(client_for(theirs).get("/api/usage?route=web.scrape"))
    ] == ["t-scrape"]
    assert (detail["route"], *(detail[u] for u in WEB_UNITS)) == ("web.crawl", 6, 2, 0)
    too_long = client.get(f"/api/usage?route={'w' * 33}")
    assert too_long.json()["error"]["code"] == "LM-2001"


def test_totals_per_day_and_per_model_sum_the_units(web_usage):
    mine, _ = web_usage
    client = client_for(mine)

    days = results(client.get("/api/usage/daily"))
    web_days = results(client.get("/api/usage/daily?route=web.scrape"))
    models = results(client.get("/api/usage/models"))

    def units(total: dict) -> tuple:
        return tuple(total[key] for key in ("requests", "provider_cost_micro", *WEB_UNITS))

    assert [(d["day"], *units(d)) for d in days] == [
        ("2026-03-01", 2, 1_000, 1, 1, 0),
        ("2026-03-02", 3, 2_400, 6, 2, 3),
    ]
    assert [(d["day"], *units(d)) for d in web_days] == [("2026-03-01", 2, 1_000, 1, 1, 0)]
    # Web rows name no model: they total under the empty name, chat under its model.
    assert [(m["model"], *units(m)) for m in models] == [
        ("", 4, 3_400, 7, 3, 3),
        ("gpt-4o-mini", 1, 0, 0, 0, 0),
    ]


def test_the_csv_export_has_a_column_per_unit(web_usage):
    mine, _ = web_usage

    response = client_for(mine).get("/api/usage/export.csv?route=web.crawl")

    assert response.status_code == 200
    text = streamed_body(response).decode()
    header = next(csv.reader(io.StringIO(text)))
    [line] = list(csv.DictReader(io.StringIO(text)))
    assert set(WEB_UNITS) <= set(header)
    assert header.index("web_pages") == header.index("reasoning_tokens") + 1
    assert (line["request_id"], line["route"], *(line[u] for u in WEB_UNITS)) == (
        "w-crawl",
        "web.crawl",
        "6",
        "2",
        "0",
    )


def test_the_admin_list_shows_web_units_in_one_column_by_kind(web_usage, admin_client):
    listing = admin_client.get("/django-admin/usage/usagelog/?q=w-crawl")

    assert listing.status_code == 200
    page = listing.content.decode()
    assert "web units" in page.lower()
    assert "pages 6, rendered 2" in page
    assert "w-crawl" in page and "w-scrape" not in page
