"""A usage row's attempt trail, packed in the row (usage/trail.py): it reads back exactly, in
the tenant API and the admin as the attempts table showed it; a typical trail takes a few
dozen bytes on disk; migration 0012 moves the old table's attempts into the rows in SQL."""

from __future__ import annotations

import json

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.core import serializers
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from core.usage_record import ATTEMPT_FIELDS, AttemptRecord
from tests.support.databases import admin_connection, manage
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from tests.support.usage import attempt, database_dump, journal_row, store
from usage.api.serializers import UsageAttemptOut
from usage.models import UsageLog
from usage.trail import pack_trail, unpack_trail

# Refused before any call (a breaker open: no key, no status), a team key's 429, then the
# next team key served.
RETRIED = [
    attempt(
        1,
        provider="anthropic-main",
        model="claude-3-5-haiku",
        served_by="",
        source="anthropic-main:claude-3-5-haiku",
        outcome="circuit_open",
        upstream_status=None,
        latency_ms=0,
    ),
    attempt(
        2,
        provider="openai-main",
        served_by="team",
        source="openai-main:gpt-4o-mini:team",
        outcome="upstream_error",
        upstream_status=429,
        latency_ms=41,
        key_label="team-key-a",
    ),
    attempt(
        3,
        provider="openai-main",
        served_by="team",
        source="openai-main:gpt-4o-mini:team",
        outcome="ok",
        upstream_status=200,
        latency_ms=812,
        key_label="team-key-b",
    ),
]


def test_a_trail_packs_and_reads_back_exactly():
    trail = (
        AttemptRecord(1, "opénai", "gpt-4o", "team", "opénai:gpt-4o:team", "timeout", None, 30_000),
        AttemptRecord(2, "p", "m", "platform", "s", "ok", 200, 7, 2**40, "pool-1"),
    )

    packed = pack_trail(trail)

    assert packed[0] == 1 and unpack_trail(packed) == trail
    assert unpack_trail(memoryview(packed)) == trail
    assert pack_trail(()) == b"" and unpack_trail(b"") == ()
    # Plain JSON arrays, as migration 0012 wrote them in SQL, read the same.
    plain = json.dumps([[getattr(a, name) for name in ATTEMPT_FIELDS] for a in trail], indent=1)
    assert unpack_trail(plain.encode()) == trail
    with pytest.raises(ValueError):
        unpack_trail(b"\x09not a trail")


def test_the_apis_attempt_fields_are_the_records_in_order():
    assert tuple(UsageAttemptOut().fields) == ATTEMPT_FIELDS


@pytest.mark.django_db
def test_a_retried_trail_reads_back_exactly_through_the_api_and_the_admin():
    tenant = make_tenant()
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-retried",
            served_by="team",
            attempts=RETRIED,
        )
    )
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")

    response = api.get("/api/usage/requests/req-retried")

    # The attempts' JSON as the attempts table's serializer wrote it: fields and order.
    body = orjson.loads(response.content)
    assert orjson.dumps(body["attempts"]) == (
        b'[{"order":1,"provider":"anthropic-main","model":"claude-3-5-haiku","served_by":"",'
        b'"source":"anthropic-main:claude-3-5-haiku","outcome":"circuit_open",'
        b'"upstream_status":null,"latency_ms":0,"reservation_id":null,"key_label":""},'
        b'{"order":2,"provider":"openai-main","model":"gpt-4o-mini","served_by":"team",'
        b'"source":"openai-main:gpt-4o-mini:team","outcome":"upstream_error",'
        b'"upstream_status":429,"latency_ms":41,"reservation_id":null,'
        b'"key_label":"team-key-a"},'
        b'{"order":3,"provider":"openai-main","model":"gpt-4o-mini","served_by":"team",'
        b'"source":"openai-main:gpt-4o-mini:team","outcome":"ok","upstream_status":200,'
        b'"latency_ms":812,"reservation_id":null,"key_label":"team-key-b"}]'
    )
    assert body["attempts"] == [{"key_label": "", **a} for a in RETRIED[:1]] + RETRIED[1:]

    operator = Client()
    operator.force_login(
        get_user_model().objects.create_superuser("root", "r@example.invalid", "pw")
    )
    row = UsageLog.objects.get(request_id="req-retried")
    page = operator.get(f"/django-admin/usage/usagelog/{row.pk}/change/").content.decode()

    header = "".join(f'<th scope="col">{name}</th>' for name in ATTEMPT_FIELDS)
    assert f'<table class="attempt-trail"><thead><tr>{header}</tr></thead><tbody>' in page
    assert (
        "<tr><td>1</td><td>anthropic-main</td><td>claude-3-5-haiku</td><td></td>"
        "<td>anthropic-main:claude-3-5-haiku</td><td>circuit_open</td><td>-</td><td>0</td>"
        "<td>-</td><td></td></tr>"
        "<tr><td>2</td><td>openai-main</td><td>gpt-4o-mini</td><td>team</td>"
        "<td>openai-main:gpt-4o-mini:team</td><td>upstream_error</td><td>429</td><td>41</td>"
        "<td>-</td><td>team-key-a</td></tr>"
        "<tr><td>3</td><td>openai-main</td><td>gpt-4o-mini</td><td>team</td>"
        "<td>openai-main:gpt-4o-mini:team</td><td>ok</td><td>200</td><td>812</td>"
        "<td>-</td><td>team-key-b</td></tr></tbody></table>"
    ) in page


@pytest.mark.django_db
def test_a_dump_shows_the_trails_json_and_loads_it_back():
    tenant = make_tenant()
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-dumped",
            attempts=RETRIED,
        )
    )
    row = UsageLog.objects.get(request_id="req-dumped")

    dumped = serializers.serialize("json", [row])
    (loaded,) = serializers.deserialize("json", dumped)

    # Readable and searchable as the other columns are (a privacy check greps dumps).
    assert '\\"team-key-a\\"' in dumped and "team-key-b" in database_dump()
    assert loaded.object.attempts == row.attempts and len(row.attempts) == 3


@requires_postgres
@pytest.mark.django_db
def test_a_typical_trail_takes_a_few_dozen_bytes_on_disk():
    tenant = make_tenant()
    served = attempt(
        provider="openai-main",
        source="openai-main:gpt-4o-mini:platform",
        latency_ms=812,
        reservation_id=48_213_907,
    )
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-typical",
            attempts=[served],
        ),
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-retried",
            attempts=RETRIED,
        ),
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-refused",
            attempts=[],
        ),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT request_id, pg_column_size(attempt_trail) FROM usage_usagelog"
            " WHERE account_id = %s",
            [tenant.account_id],
        )
        sizes = dict(cursor.fetchall())

    # With the value's 1-byte header: 104 bytes of JSON in 20, three attempts' 321 in 45, no
    # attempt in 1 (the attempts table took ~218 B per usage row, measured at 200k rows).
    assert sizes == {"req-typical": 20, "req-retried": 45, "req-refused": 1}


@requires_postgres
def test_migration_moves_each_rows_attempts_into_its_trail(throwaway_database):
    name, url = throwaway_database
    manage(url, "migrate", "usage", "0011_attempt_key_label")
    with admin_connection(name) as db:
        logs = {}
        for request_id in ("with-trail", "without"):
            (logs[request_id],) = db.execute(
                "INSERT INTO usage_usagelog (request_id, client_request_id, created_at,"
                " stored_at, caller_label, route, model_requested, model_served, provider,"
                " served_by, tokens_in, tokens_out, byok_tokens_in, byok_tokens_out,"
                " cache_read_tokens, cache_write_tokens, reasoning_tokens, provider_cost_micro,"
                " bytes_in, bytes_out, bandwidth_charge_micro, upstream_sent, status,"
                " error_code, latency_ms, streamed) VALUES (%s, '', now(), now(), '', 'chat',"
                " 'm', 'm', 'p', 'team', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, true, 200, '', 5,"
                " false) RETURNING id",
                [request_id],
            ).fetchone()
        # Written the old way, the last try first: the trail is in order all the same.
        for order, served_by, source, outcome, status, latency, reservation, key in (
            (3, "platform", "p:modèle:platform-fallback", "ok", 200, 812, 48_213_907, ""),
            (1, "", "p:modèle", "circuit_open", None, 0, None, ""),
            (2, "team", "p:modèle:team", "upstream_error", 429, 41, None, "team-key-a"),
        ):
            db.execute(
                'INSERT INTO usage_usageattempt (log_id, created_at, "order", provider, model,'
                " served_by, source, outcome, upstream_status, latency_ms, reservation_id,"
                " key_label) SELECT id, created_at, %s, 'p', 'modèle', %s, %s, %s, %s, %s, %s,"
                " %s FROM usage_usagelog WHERE id = %s",
                [
                    order,
                    served_by,
                    source,
                    outcome,
                    status,
                    latency,
                    reservation,
                    key,
                    logs["with-trail"],
                ],
            )

    manage(url, "migrate")

    with admin_connection(name) as db:
        trails = dict(db.execute("SELECT request_id, attempt_trail FROM usage_usagelog"))
        assert db.execute("SELECT to_regclass('usage_usageattempt')").fetchone() == (None,)
    assert trails["with-trail"][:1] == b"["  # plain JSON, as SQL wrote it
    assert unpack_trail(trails["with-trail"]) == (
        AttemptRecord(1, "p", "modèle", "", "p:modèle", "circuit_open", None, 0, None, ""),
        AttemptRecord(
            2, "p", "modèle", "team", "p:modèle:team", "upstream_error", 429, 41, None, "team-key-a"
        ),
        AttemptRecord(
            3,
            "p",
            "modèle",
            "platform",
            "p:modèle:platform-fallback",
            "ok",
            200,
            812,
            48_213_907,
            "",
        ),
    )
    assert trails["without"] == b""
