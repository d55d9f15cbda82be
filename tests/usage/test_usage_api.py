"""The tenant usage API: the caller's own rows only, filters, totals per day and per model,
CSV export; and the operators' read-only admin with the attempt trail and delivery status."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from tests.support.tenants import client_for, make_tenant
from tests.support.usage import after_windows, journal_row, store, streamed_body

pytestmark = pytest.mark.django_db

DAY1 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
DAY2 = datetime(2026, 3, 2, 23, 59, 59, tzinfo=UTC)


def second_group_and_key(tenant):
    from accounts.models import Group
    from accounts.services import api_key_create, group_create

    group = group_create(account=Group.objects.get(pk=tenant.group_id).account, name="second")
    api_key, _ = api_key_create(group=group, name="second")
    return group, api_key


@pytest.fixture
def usage():
    """Two tenants' rows: mine over two days, groups, keys, callers and models; theirs."""
    mine, theirs = make_tenant(), make_tenant()
    group, key = second_group_and_key(mine)

    def row(tenant=mine, *, group_id=None, key_id=None, **fields):
        return journal_row(
            group_id=group_id or tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=key_id or tenant.api_key_id,
            **fields,
        )

    store(
        row(
            request_id="a1",
            created_at=DAY1,
            tokens_in=10,
            tokens_out=8,
            provider_cost_micro=7,
            bytes_in=100,
            bytes_out=200,
            bandwidth_charge_micro=1,
            caller_label="c_alice",
            attempts=[
                {
                    "order": 1,
                    "provider": "stub-openai",
                    "model": "gpt-4o",
                    "served_by": "platform",
                    "source": "x",
                    "outcome": "upstream_error",
                    "upstream_status": 500,
                    "latency_ms": 5,
                    "reservation_id": None,
                },
                {
                    "order": 2,
                    "provider": "stub-openai",
                    "model": "gpt-4o-mini",
                    "served_by": "platform",
                    "source": "x",
                    "outcome": "ok",
                    "upstream_status": 200,
                    "latency_ms": 9,
                    "reservation_id": None,
                },
            ],
        ),
        row(
            request_id="a2",
            created_at=DAY1,
            model_requested="gpt-4o",
            model_served="gpt-4o",
            tokens_in=1,
            tokens_out=2,
            provider_cost_micro=3,
            caller_label="c_bob",
        ),
        row(
            request_id="a3",
            created_at=DAY2,
            served_by="team",
            byok_tokens_in=4,
            byok_tokens_out=5,
            caller_label="c_alice",
            group_id=group.pk,
            key_id=key.pk,
        ),
        row(
            request_id="a4",
            created_at=DAY2,
            status=502,
            error_code="LM-5001",
            served_by="",
            model_served="",
            provider="",
            model_requested="=cmd|' /C calc'!A0",
        ),
        row(theirs, request_id="b1", created_at=DAY1, tokens_in=999),
    )
    return mine, theirs, group, key


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [r["request_id"] for r in response.json()["results"]]


def test_rows_are_the_callers_own_newest_first(usage):
    mine, theirs, _, _ = usage

    assert ids(client_for(mine).get("/api/usage")) == ["a4", "a3", "a2", "a1"]
    assert ids(client_for(theirs).get("/api/usage")) == ["b1"]
    response = client_for(mine).get("/api/usage?limit=2")
    assert response.json()["count"] == 4 and len(response.json()["results"]) == 2


def test_filters_by_group_key_caller_model_and_time_range(usage):
    mine, _, group, key = usage
    client = client_for(mine)

    assert ids(client.get(f"/api/usage?group={mine.group_id}")) == ["a4", "a2", "a1"]
    assert ids(client.get(f"/api/usage?group={group.pk}")) == ["a3"]
    assert ids(client.get(f"/api/usage?key={key.pk}")) == ["a3"]
    assert ids(client.get("/api/usage?caller=c_alice")) == ["a3", "a1"]
    assert ids(client.get("/api/usage?model=gpt-4o")) == ["a2"]
    assert ids(client.get("/api/usage?model=gpt-4o-mini")) == ["a3", "a1"]
    assert ids(client.get("/api/usage?start=2026-03-02")) == ["a4", "a3"]
    assert ids(client.get("/api/usage?start=2026-03-01T00:00:00Z&end=2026-03-02")) == ["a2", "a1"]
    assert client.get("/api/usage?start=2026-03-02&end=2026-03-01").status_code == 400
    assert client.get("/api/usage?group=abc").json()["error"]["code"] == "LM-2001"


def test_another_accounts_group_or_key_is_404(usage):
    mine, theirs, _, _ = usage
    client = client_for(theirs)

    for query in (f"group={mine.group_id}", f"key={mine.api_key_id}"):
        for path in (
            "/api/usage",
            "/api/usage/daily",
            "/api/usage/models",
            "/api/usage/export.csv",
        ):
            response = client.get(f"{path}?{query}")
            assert response.status_code == 404, (path, query)
            assert response.json()["error"]["code"] == "LM-2004"
    assert client.get("/api/usage/requests/a1").status_code == 404
    assert APIClient().get("/api/usage").status_code == 401


def test_one_request_shows_its_attempt_trail(usage):
    mine, _, _, _ = usage

    body = client_for(mine).get("/api/usage/requests/a1").json()

    assert (body["request_id"], body["tokens_in"], body["caller_label"]) == ("a1", 10, "c_alice")
    assert [
        (a["order"], a["model"], a["outcome"], a["upstream_status"]) for a in body["attempts"]
    ] == [(1, "gpt-4o", "upstream_error", 500), (2, "gpt-4o-mini", "ok", 200)]


def test_totals_per_day_and_per_model(usage):
    mine, _, _, _ = usage
    client = client_for(mine)

    days = client.get("/api/usage/daily").json()["results"]
    models = client.get("/api/usage/models").json()["results"]

    assert [
        (
            d["day"],
            d["requests"],
            d["errors"],
            d["tokens_in"],
            d["tokens_out"],
            d["byok_tokens_in"],
            d["byok_tokens_out"],
            d["provider_cost_micro"],
            d["bytes_in"],
            d["bytes_out"],
            d["bandwidth_charge_micro"],
        )
        for d in days
    ] == [
        ("2026-03-01", 2, 0, 11, 10, 0, 0, 10, 100, 200, 1),
        ("2026-03-02", 2, 1, 0, 0, 4, 5, 0, 0, 0, 0),
    ]
    assert [(m["model"], m["requests"], m["tokens_in"], m["byok_tokens_in"]) for m in models] == [
        ("=cmd|' /C calc'!A0", 1, 0, 0),
        ("gpt-4o", 1, 1, 0),
        ("gpt-4o-mini", 2, 10, 4),
    ]
    assert [
        d["requests"] for d in client.get("/api/usage/daily?caller=c_alice").json()["results"]
    ] == [1, 1]


def test_csv_export_has_a_header_and_one_line_per_row(usage):
    mine, _, group, _ = usage

    response = client_for(mine).get(f"/api/usage/export.csv?group={mine.group_id}")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    lines = list(csv.DictReader(io.StringIO(streamed_body(response).decode())))
    assert [line["request_id"] for line in lines] == ["a4", "a2", "a1"]
    assert lines[2]["tokens_in"] == "10" and lines[2]["created_at"] == DAY1.isoformat()
    assert lines[0]["model_requested"] == "'=cmd|' /C calc'!A0"  # a formula is defused


def test_admin_shows_the_log_with_its_trail_and_events_read_only(usage, admin_client):
    from usage.models import UsageEvent, UsageLog
    from usage.services import usage_events_flush

    row = UsageLog.objects.get(request_id="a1")
    mine, theirs, group, _ = usage
    usage_events_flush(now=after_windows())
    groups = [mine.group_id, theirs.group_id, group.pk]
    assert UsageEvent.objects.filter(group_id__in=groups).count() == 3
    event = UsageEvent.objects.filter(group_id=mine.group_id).get()

    listing = admin_client.get("/django-admin/usage/usagelog/")
    detail = admin_client.get(f"/django-admin/usage/usagelog/{row.pk}/change/")
    events = admin_client.get("/django-admin/usage/usageevent/")
    event_page = admin_client.get(f"/django-admin/usage/usageevent/{event.pk}/change/")

    assert listing.status_code == detail.status_code == events.status_code == 200
    assert event_page.status_code == 200
    assert b"a1" in listing.content and b"upstream_error" in detail.content
    assert b"pending" in events.content
    assert admin_client.get("/django-admin/usage/usagelog/add/").status_code == 403
    UsageEvent.objects.filter(pk=event.pk).update(delivery="failed", delivery_attempts=10)
    admin_client.post(
        "/django-admin/usage/usageevent/",
        {"action": "deliver_again", "_selected_action": [event.pk]},
    )
    event.refresh_from_db()
    assert (event.delivery, event.delivery_attempts) == ("pending", 0)
    assert b'name="_save"' not in detail.content
