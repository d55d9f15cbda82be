"""The usage log's stored_at is indexed by BRIN on PostgreSQL (usage 0014), not a B-tree:
the events' and reconciliation's windows of stored_at read through it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from tests.usage.test_label_indexes import load_rows

pytestmark = [requires_postgres, pytest.mark.django_db]


def test_stored_at_has_a_brin_index_and_no_btree():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'usage_usagelog'"
            " AND indexdef LIKE '%%(stored_at)%%'"
        )
        indexes = cursor.fetchall()
    assert [name for name, _ in indexes] == ["usage_log_stored_brin"]
    assert "USING brin (stored_at) WITH (autosummarize='on')" in indexes[0][1]


def test_a_window_of_stored_at_reads_through_the_brin_index():
    from usage.services import Window, _rows_in

    tenant = make_tenant()
    load_rows(tenant.account_id, tenant.group_id)
    now = timezone.now()
    window = Window(start=now - timedelta(minutes=1), end=now + timedelta(minutes=1))
    query = _rows_in(window)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = query.explain()
        used = set(re.findall(r"Bitmap Index Scan on (\S+)", plan))
        assert used, plan
        cursor.execute(
            "SELECT DISTINCT inhparent::regclass::text FROM pg_inherits"
            " WHERE inhrelid = ANY(%s::regclass[])",
            [sorted(used)],
        )
        assert cursor.fetchall() == [("usage_log_stored_brin",)]
    assert query.count() == 3_000
