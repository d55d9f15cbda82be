"""Request tags in the usage books: stored on the row, filtering `/api/usage?tag=` (the
caller's accounts only), totalled per tag by `/api/usage/tags` from the tag rollups and the
rows at partial hours, exactly, in the CSV export's last column; the same on SQLite."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.databases import run_on_sqlite
from tests.support.tenants import client_for, make_tenant
from tests.support.usage import journal_row, store, streamed_body
from usage.models import UsageLog, UsageTagRollup
from usage.rollups import rebuild_rollups
from usage.tags import tag_totals

pytestmark = pytest.mark.django_db

HOUR = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def row(tenant, request_id: str, tags: list[str], at: datetime, **fields) -> dict:
    return journal_row(
        group_id=tenant.group_id,
        account_id=tenant.account_id,
        api_key_id=tenant.api_key_id,
        request_id=request_id,
        created_at=at,
        tags=tags,
        **fields,
    )


@pytest.fixture
def tagged():
    """My rows: two tagged `team:a` (one also `env:prod`), one untagged; theirs tagged the same."""
    mine, theirs = make_tenant(), make_tenant()
    store(
        row(mine, "m1", ["team:a", "env:prod"], HOUR + timedelta(minutes=5),
            tokens_in=10, tokens_out=5, provider_cost_micro=1_234_567, bandwidth_charge_micro=3),
        row(mine, "m2", ["team:a"], HOUR + timedelta(hours=1, minutes=30),
            tokens_in=7, tokens_out=1, provider_cost_micro=89, status=502, error_code="LM-5001"),
        row(mine, "m3", [], HOUR + timedelta(minutes=10), tokens_in=1000, provider_cost_micro=999),
        row(theirs, "t1", ["team:a"], HOUR + timedelta(minutes=20),
            tokens_in=50, provider_cost_micro=5_000_000),
    )  # fmt: skip
    return mine, theirs


def test_tags_are_stored_on_the_row_as_sent(tagged):
    assert UsageLog.objects.get(request_id="m1").tags == ["team:a", "env:prod"]
    assert UsageLog.objects.get(request_id="m3").tags == []


def test_a_row_journaled_before_tags_existed_is_stored_without_any(tagged):
    mine, _ = tagged
    old = row(mine, "old", [], HOUR)
    del old["tags"]
    store(old)
    assert UsageLog.objects.get(request_id="old").tags == []


def test_the_tag_filter_reads_only_the_callers_rows_carrying_it(tagged):
    mine, theirs = tagged
    got = client_for(mine).get("/api/usage", {"tag": "TEAM:A"}).json()  # lower-cased
    assert sorted(r["request_id"] for r in got["results"]) == ["m1", "m2"]
    assert {tuple(r["tags"]) for r in got["results"]} == {("team:a", "env:prod"), ("team:a",)}
    env = client_for(mine).get("/api/usage", {"tag": "env:prod"}).json()["results"]
    assert [r["request_id"] for r in env] == ["m1"]
    assert client_for(theirs).get("/api/usage", {"tag": "env:prod"}).json()["results"] == []


def test_a_bad_tag_filter_is_a_400_naming_the_rule(tagged):
    mine, _ = tagged
    response = client_for(mine).get("/api/usage", {"tag": "no spaces"})
    assert response.status_code == 400
    assert "is not valid: a tag is 1-64 characters" in response.json()["error"]["message"]


def test_totals_with_a_tag_filter_sum_only_its_rows(tagged):
    mine, _ = tagged
    [day] = client_for(mine).get("/api/usage/daily", {"tag": "team:a"}).json()["results"]
    assert (day["requests"], day["tokens_in"], day["provider_cost_micro"]) == (2, 17, 1_234_656)


EXPECTED = [
    {
        "tag": "env:prod",
        "requests": 1,
        "errors": 0,
        "tokens_in": 10,
        "tokens_out": 5,
        "byok_tokens_in": 0,
        "byok_tokens_out": 0,
        "provider_cost_micro": 1_234_567,
        "bandwidth_charge_micro": 3,
        "spend_micro": 1_234_570,
    },
    {
        "tag": "team:a",
        "requests": 2,
        "errors": 1,
        "tokens_in": 17,
        "tokens_out": 6,
        "byok_tokens_in": 0,
        "byok_tokens_out": 0,
        "provider_cost_micro": 1_234_656,
        "bandwidth_charge_micro": 3,
        "spend_micro": 1_234_659,
    },
]


@pytest.mark.parametrize(
    "params",
    [
        {},  # all of it: the rollups only
        {"start": "2026-03-01T10:00:00Z", "end": "2026-03-01T12:00:00Z"},  # whole hours
        {"start": "2026-03-01T10:01:00Z", "end": "2026-03-01T11:45:00Z"},  # partial: rows
        {"start": "2026-03-01T10:04:00Z", "end": "2026-03-01T10:06:00Z"},  # inside one hour
    ],
)
def test_tag_totals_are_exact_whatever_the_range(tagged, params):
    mine, _ = tagged
    got = client_for(mine).get("/api/usage/tags", params).json()["results"]
    if params.get("end") == "2026-03-01T10:06:00Z":
        assert got == [
            {**EXPECTED[0]},
            {**EXPECTED[0], "tag": "team:a"},  # only m1 is in those two minutes
        ]
    else:
        assert got == EXPECTED


def test_tag_totals_never_count_another_accounts_rows(tagged):
    _, theirs = tagged
    [only] = client_for(theirs).get("/api/usage/tags").json()["results"]
    assert (only["tag"], only["requests"], only["provider_cost_micro"]) == ("team:a", 1, 5_000_000)


def test_the_rollups_rebuild_to_what_the_writer_kept(tagged):
    mine, _ = tagged
    kept = sorted(UsageTagRollup.objects.values_list("account_id", "hour", "tag", "requests"))
    rebuild_rollups(start=HOUR, end=HOUR + timedelta(hours=2))
    assert sorted(UsageTagRollup.objects.values_list("account_id", "hour", "tag", "requests")) == (
        kept
    )
    assert tag_totals(accounts=[mine.account_id]) == EXPECTED


def test_the_csv_export_ends_with_a_tags_column_then_the_guardrails(tagged):
    mine, _ = tagged
    response = client_for(mine).get("/api/usage/export.csv")
    lines = list(csv.reader(io.StringIO(streamed_body(response).decode())))
    assert lines[0][-3:] == ["measurement", "tags", "guardrails"]
    request_id = lines[0].index("request_id")
    assert {line[request_id]: line[-1] for line in lines[1:]} == {"m1": "", "m2": "", "m3": ""}
    assert {line[request_id]: line[-2] for line in lines[1:]} == {
        "m1": "team:a,env:prod",
        "m2": "team:a",
        "m3": "",
    }


SQLITE_SCRIPT = """
import json
from datetime import UTC, datetime

import django
import orjson

django.setup()
from django.core.management import call_command

call_command("migrate", verbosity=0)
from core.usage_record import UsageRecord
from usage.models import UsageLog
from usage.selectors import usage_logs
from usage.tags import tag_totals
from usage.writer import store_rows

store_rows([UsageRecord.from_json(orjson.dumps(row)) for row in json.loads(ROWS)])
print(json.dumps({
    "tagged": sorted(r.request_id for r in usage_logs(accounts=[1], tag="team:a")),
    "stored": UsageLog.objects.get(request_id="m1").tags,
    "partial": tag_totals(accounts=[1], start=datetime(2026, 3, 1, 10, 1, tzinfo=UTC)),
    "whole": tag_totals(accounts=[1]),
}))
"""


def test_the_same_on_sqlite(tmp_path):
    def sqlite_row(request_id, tags, minutes, cost):
        data = journal_row(
            group_id=1, account_id=1, request_id=request_id,
            created_at=HOUR + timedelta(minutes=minutes), tags=tags, provider_cost_micro=cost,
        )  # fmt: skip
        return data

    rows = [
        sqlite_row("m1", ["team:a", "env:prod"], 0, 5),
        sqlite_row("m2", ["team:a"], 70, 7),
        sqlite_row("m3", [], 5, 11),
    ]
    report = run_on_sqlite(f"ROWS = {json.dumps(json.dumps(rows))}\n{SQLITE_SCRIPT}", tmp_path)
    assert report["tagged"] == ["m1", "m2"]
    assert report["stored"] == ["team:a", "env:prod"]
    assert [(t["tag"], t["requests"], t["spend_micro"]) for t in report["whole"]] == [
        ("env:prod", 1, 5),
        ("team:a", 2, 12),
    ]
    assert [(t["tag"], t["requests"], t["spend_micro"]) for t in report["partial"]] == [
        ("team:a", 1, 7)
    ]
