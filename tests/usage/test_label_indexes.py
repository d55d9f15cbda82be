"""The caller-label and client-request-id indexes hold only rows that have one (PostgreSQL),
and the usage API's `?caller=` and `?client_request_id=` filters, and a request looked up by
its client id, still read through them."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

pytestmark = [requires_postgres, pytest.mark.django_db]

ROWS = 3_000
CALLERS = ("", "", "", "etl", "web-app", "support-bot", "nightly-eval", "mobile", "search-ui")


def load_rows(account_id: int, group_id: int) -> None:
    """ROWS of this month's usage: a third without a caller label, 70% without a client id."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO usage_usagelog (request_id, client_request_id, created_at, stored_at,"
            " account_id, group_id, caller_label, route, model_requested, model_served,"
            " provider, served_by, tokens_in, tokens_out, byok_tokens_in, byok_tokens_out,"
            " cache_read_tokens, cache_write_tokens, reasoning_tokens, provider_cost_micro,"
            " bytes_in, bytes_out, bandwidth_charge_micro, upstream_sent, status, error_code,"
            " latency_ms, streamed)"
            " SELECT 'req-' || n, CASE WHEN n %% 10 < 3 THEN 'client-' || n ELSE '' END,"
            " now() - n * interval '1 second', now(), %s, %s, (%s::text[])[n %% 9 + 1], 'chat',"
            " 'm', 'm', 'p', 'platform', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, true, 200, '', 5,"
            " false FROM generate_series(1, %s) n",
            [account_id, group_id, list(CALLERS), ROWS],
        )
        cursor.execute("ANALYZE usage_usagelog")


def indexes_used(sql: str) -> set[str]:
    """The partitioned indexes whose partitions' indexes the statement's plan reads."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row for (row,) in cursor.fetchall())
        used = re.findall(r"Index (?:Only )?Scan (?:Backward )?(?:using|on) (\S+)", plan)
        assert used, plan
        cursor.execute(
            "SELECT DISTINCT inhparent::regclass::text FROM pg_inherits"
            " WHERE inhrelid = ANY(%s::regclass[])",
            [sorted(set(used))],
        )
        return {name for (name,) in cursor.fetchall()}


def test_rows_without_a_label_or_client_id_stay_out_of_their_indexes():
    tenant = make_tenant()
    load_rows(tenant.account_id, tenant.group_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.inhparent::regclass::text, sum(c.reltuples)::int FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = ANY(%s::regclass[]) GROUP BY 1",
            [["usage_log_caller_time", "usage_log_client_request"]],
        )
        entries = dict(cursor.fetchall())

    # Of 3,000 rows, 1,001 have no caller label (n % 9 < 3) and 2,100 no client request id.
    assert entries == {"usage_log_caller_time": 1_999, "usage_log_client_request": 900}


@pytest.mark.parametrize(
    "path, column, index",
    [
        ("/api/usage?caller=etl", "caller_label", "usage_log_caller_time"),
        ("/api/usage?client_request_id=client-20", "client_request_id", "usage_log_client_request"),
        ("/api/usage/requests/client-20", "client_request_id", "usage_log_client_request"),
    ],
)
def test_the_apis_filters_read_through_the_partial_indexes(path, column, index):
    tenant = make_tenant()
    load_rows(tenant.account_id, tenant.group_id)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")

    with CaptureQueriesContext(connection) as queries:
        assert api.get(path).status_code == 200
    filtered = [
        q["sql"]
        for q in queries.captured_queries
        if "usage_usagelog" in q["sql"] and re.search(rf'"{column}" = \'\w', q["sql"])
    ]
    assert filtered, [q["sql"] for q in queries.captured_queries]

    with transaction.atomic(), connection.cursor() as cursor:
        # Tables this small may be read whole; forbid that, so the plan shows whether the
        # index's condition (a label is not empty) is proven by the filter at all.
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql in filtered:
            assert index in indexes_used(sql), sql
