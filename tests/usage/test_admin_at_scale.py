"""The operators' usage lists stay cheap whatever the history: no full counts, an exact id
search on its index, filters with fixed choices, no drill-down over every row's dates."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 6, 1, 12, tzinfo=UTC)


@pytest.fixture
def many_rows():
    tenant = make_tenant()
    rows = [
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id=f"adm-{i:03d}",
            created_at=T0 + timedelta(seconds=i),
            status=200 if i % 10 else 503,
            endpoint="web.scrape" if i % 7 == 0 else "chat",
        )
        for i in range(120)
    ]
    store(*rows)
    return tenant


def test_the_usage_list_counts_nothing_whole_and_offers_fixed_filters(many_rows, admin_client):
    with CaptureQueriesContext(connection) as queries:
        listing = admin_client.get("/django-admin/usage/usagelog/")

    assert listing.status_code == 200
    page = listing.content.decode()
    sql = [q["sql"] for q in queries.captured_queries if "usage_usagelog" in q["sql"]]
    assert not any("DISTINCT" in q for q in sql)  # the filters' choices are fixed
    counts = [q for q in sql if "COUNT(" in q.upper()]
    assert counts and all(re.search(r"LIMIT 10000\b", q) for q in counts)
    assert "date_hierarchy" not in page and "xfull" not in page
    assert "4xx refused" in page and "Web (scrape, search, crawl)" in page
    # Newest first.
    assert page.index("adm-119") < page.index("adm-118")


def test_the_search_finds_one_request_id_exactly(many_rows, admin_client):
    with CaptureQueriesContext(connection) as queries:
        found = admin_client.get("/django-admin/usage/usagelog/", {"q": "adm-042"})

    page = found.content.decode()
    assert found.status_code == 200
    assert "adm-042" in page and "adm-041" not in page and "adm-142" not in page
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "UPPER(" not in sql and "LIKE" not in sql.upper()
    prefix = admin_client.get("/django-admin/usage/usagelog/", {"q": "adm-04"}).content.decode()
    assert re.findall(r"adm-\d{3}", prefix) == []  # a prefix is not a request id


def test_the_fixed_filters_select_what_they_say(many_rows, admin_client):
    failed = admin_client.get("/django-admin/usage/usagelog/", {"outcome": "failed"})
    web = admin_client.get("/django-admin/usage/usagelog/", {"kind": "web"})

    failed_ids = set(re.findall(r"adm-\d{3}", failed.content.decode()))
    web_ids = set(re.findall(r"adm-\d{3}", web.content.decode()))
    assert failed_ids == {f"adm-{i:03d}" for i in range(120) if i % 10 == 0}
    assert web_ids == {f"adm-{i:03d}" for i in range(120) if i % 7 == 0}


def test_the_hourly_rollups_are_listed_for_operators(many_rows, admin_client):
    listing = admin_client.get("/django-admin/usage/usagerollup/", {"q": many_rows.account_id})

    assert listing.status_code == 200
    page = listing.content.decode()
    # 120 rows in 2 minutes of one hour: one rollup per endpoint, 12 errors among them.
    assert page.count('class="field-requests"') == 2
    assert ">102<" in page and ">18<" in page  # chat and web.scrape rows
