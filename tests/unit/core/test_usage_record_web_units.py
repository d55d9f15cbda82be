"""The usage record's web units: defaults for records journaled before them, a JSON round
trip that keeps them, a place in the tenant fields, and a counter by kind in the metrics."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime

import orjson

from core.metrics import REGISTRY, count_usage
from core.usage_record import LOG_FIELDS, TENANT_FIELDS, WEB_UNIT_FIELDS, UsageRecord

_group_ids = itertools.count(9_100_000)  # groups no other test counts usage for


def scrape_record(**fields) -> UsageRecord:
    record = UsageRecord(
        request_id="req-web",
        client_request_id="",
        created_at=datetime(2026, 3, 1, 10, tzinfo=UTC),
        account_id=1,
        group_id=next(_group_ids),
        api_key_id=1,
        caller_label="",
        endpoint="web.scrape",
        model_requested="",
        model_served="",
        provider="web-render",
        served_by="platform",
        tokens_in=0,
        tokens_out=0,
        byok_tokens_in=0,
        byok_tokens_out=0,
        provider_cost_micro=900,
        bytes_in=100,
        bytes_out=20_000,
        bandwidth_charge_micro=0,
        upstream_sent=True,
        status=200,
        error_code="",
        latency_ms=40,
        ttft_ms=None,
        streamed=False,
        reservation_id=None,
    )
    return replace(record, **fields)


def test_a_record_journaled_before_the_web_units_decodes_with_none():
    entry = orjson.loads(scrape_record().to_json())
    for unit in WEB_UNIT_FIELDS:
        del entry[unit]

    record = UsageRecord.from_json(orjson.dumps(entry))

    assert (record.web_pages, record.web_rendered_pages, record.web_queries) == (0, 0, 0)
    assert record == scrape_record(group_id=record.group_id)


def test_web_units_survive_the_journal_round_trip_and_are_row_and_tenant_fields():
    record = scrape_record(web_pages=2, web_rendered_pages=1, web_queries=4)

    decoded = UsageRecord.from_json(record.to_json())

    assert decoded == record
    assert {unit: decoded.log_columns()[unit] for unit in WEB_UNIT_FIELDS} == {
        "web_pages": 2,
        "web_rendered_pages": 1,
        "web_queries": 4,
    }
    at = LOG_FIELDS.index("reasoning_tokens") + 1
    assert LOG_FIELDS[at : at + 3] == WEB_UNIT_FIELDS
    assert set(WEB_UNIT_FIELDS) <= set(TENANT_FIELDS)


def _sample(name: str, record: UsageRecord, **labels: str) -> float | None:
    """One sample of the record's (model, group, served_by) series; None when it has none."""
    series = {"model": "none", "group": str(record.group_id), "served_by": "platform"}
    return REGISTRY.get_sample_value(name, {**series, **labels})


def test_count_usage_adds_web_units_by_kind_and_no_series_for_an_unused_kind():
    record = scrape_record(web_pages=3, web_rendered_pages=2)

    count_usage(record)
    count_usage(replace(record, web_pages=1, web_rendered_pages=0))

    assert [_sample("tollgate_web_units_total", record, kind=kind) for kind in WEB_UNIT_FIELDS] == [
        4.0,
        2.0,
        None,
    ]
    assert _sample("tollgate_provider_cost_micro_total", record) == 1_800.0
