"""Usage events: one per (account, group) and closed window, every unit, schema-valid, written
once however often or concurrently the flush runs, and delivered to a signed webhook."""

from __future__ import annotations

import hashlib
import hmac
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from jsonschema import ValidationError

from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant
from tests.support.usage import after_windows, journal_row, store

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = timedelta(hours=1)
NO_WEB_UNITS = {"web_pages": 0, "web_rendered_pages": 0, "web_queries": 0}
NOTHING_UNCOLLECTED = {"uncollected_micro_usd": 0}  # every wallet covered its costs


def age_rows(by: timedelta, *tenants) -> None:
    """Move the tenants' stored rows back in time, as if they had been stored `by` earlier.

    Only theirs: a row an earlier test's gateway stores late stays in the open window.
    """
    from django.db.models import F

    from usage.models import UsageLog

    UsageLog.objects.filter(group_id__in=[t.group_id for t in tenants]).update(
        stored_at=F("stored_at") - by, created_at=F("created_at") - by
    )


def events(*tenants):
    from usage.models import UsageEvent

    return list(
        UsageEvent.objects.filter(group_id__in=[t.group_id for t in tenants]).order_by(
            "window_start", "group_id"
        )
    )


def platform_row(tenant, **fields) -> dict:
    return journal_row(
        group_id=tenant.group_id,
        account_id=tenant.account_id,
        api_key_id=tenant.api_key_id,
        **fields,
    )


def test_closed_window_emits_one_event_per_group_with_every_unit():
    from usage.services import event_schema_validator, usage_events_flush

    platform, team, bandwidth_only = make_tenant(), make_tenant(), make_tenant()
    store(
        platform_row(
            platform,
            tokens_in=10,
            tokens_out=8,
            provider_cost_micro=7,
            bytes_in=300,
            bytes_out=900,
            bandwidth_charge_micro=2,
        ),
        platform_row(
            platform,
            tokens_in=5,
            tokens_out=8,
            provider_cost_micro=5,
            bytes_in=200,
            bytes_out=800,
            bandwidth_charge_micro=1,
        ),
        # A refusal: its bytes were metered but never billed, so they count in no unit.
        platform_row(
            platform,
            status=402,
            error_code="LM-4001",
            upstream_sent=False,
            served_by="",
            bytes_in=150,
            bytes_out=120,
        ),
        platform_row(
            team,
            served_by="team",
            byok_tokens_in=12,
            byok_tokens_out=8,
            bytes_in=400,
            bytes_out=700,
        ),
        platform_row(
            bandwidth_only,
            served_by="",
            status=502,
            error_code="LM-5001",
            bytes_in=250,
            bytes_out=90,
            bandwidth_charge_micro=1,
        ),
    )
    age_rows(HOUR, platform, team, bandwidth_only)

    assert usage_events_flush() == 3

    by_group = {e.group_id: e for e in events(platform, team, bandwidth_only)}
    assert {g: e.payload["units"] for g, e in by_group.items()} == {
        platform.group_id: {
            "tokens_in": 15,
            "tokens_out": 16,
            "provider_cost_micro_usd": 12,
            "bytes_in": 500,
            "bytes_out": 1700,
            "byok_tokens_in": 0,
            "byok_tokens_out": 0,
            **NO_WEB_UNITS,
            **NOTHING_UNCOLLECTED,
        },
        team.group_id: {
            "tokens_in": 0,
            "tokens_out": 0,
            "provider_cost_micro_usd": 0,
            "bytes_in": 400,
            "bytes_out": 700,
            "byok_tokens_in": 12,
            "byok_tokens_out": 8,
            **NO_WEB_UNITS,
            **NOTHING_UNCOLLECTED,
        },
        bandwidth_only.group_id: {
            "tokens_in": 0,
            "tokens_out": 0,
            "provider_cost_micro_usd": 0,
            "bytes_in": 250,
            "bytes_out": 90,
            "byok_tokens_in": 0,
            "byok_tokens_out": 0,
            **NO_WEB_UNITS,
            **NOTHING_UNCOLLECTED,
        },
    }
    [window_start] = {e.window_start for e in by_group.values()}
    event = by_group[platform.group_id]
    window_s = settings.TOLLGATE["USAGE_WINDOW_S"]
    assert (event.account_id, event.window_s, event.delivery) == (
        platform.account_id,
        window_s,
        "pending",
    )
    assert event.payload["requests"] == 3
    assert event.payload["event_id"] == f"ue_{platform.group_id}_{int(window_start.timestamp())}"
    assert event.payload["window_end"] == (window_start + timedelta(seconds=window_s)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    for e in by_group.values():
        event_schema_validator().validate(e.payload)


def test_a_window_is_emitted_only_once_closed_and_past_its_grace():
    from usage.models import UsageLog
    from usage.services import usage_events_flush, window_floor

    tenant = make_tenant()
    store(platform_row(tenant, tokens_in=1))
    stored_at = UsageLog.objects.get(group_id=tenant.group_id).stored_at
    closes = window_floor(stored_at, window_s=settings.TOLLGATE["USAGE_WINDOW_S"]) + timedelta(
        seconds=settings.TOLLGATE["USAGE_WINDOW_S"] + settings.TOLLGATE["USAGE_GRACE_S"]
    )

    usage_events_flush(now=stored_at)
    assert events(tenant) == []
    usage_events_flush(now=closes - timedelta(seconds=1))
    assert events(tenant) == []
    usage_events_flush(now=closes)
    assert len(events(tenant)) == 1
    usage_events_flush(now=closes + HOUR)
    assert len(events(tenant)) == 1


def test_a_row_stored_late_counts_in_the_window_it_arrived_in():
    from usage.services import usage_events_flush

    tenant = make_tenant()
    store(platform_row(tenant, tokens_in=3))
    age_rows(HOUR, tenant)
    assert usage_events_flush() == 1
    [first] = events(tenant)
    # The same minute's request, journaled by a gateway that died, claimed only now.
    late = datetime.fromisoformat(first.payload["first_request_at"].replace("Z", "+00:00"))
    store(platform_row(tenant, tokens_in=4, created_at=late))

    usage_events_flush(now=after_windows())

    [_, second] = events(tenant)
    assert second.window_start > first.window_start
    assert (second.payload["requests"], second.payload["units"]["tokens_in"]) == (1, 4)
    assert second.payload["first_request_at"] == first.payload["first_request_at"]


@requires_postgres
def test_concurrent_and_repeated_flushes_write_each_window_once():
    from usage.services import usage_events_flush

    tenants = [make_tenant() for _ in range(3)]
    store(*[platform_row(t, tokens_in=1) for t in tenants])
    age_rows(2 * HOUR, *tenants)
    store(*[platform_row(t, tokens_in=2) for t in tenants])
    age_rows(HOUR, *tenants)
    start = threading.Barrier(4)
    written: list[int] = []

    def flush() -> None:
        start.wait()
        try:
            written.append(usage_events_flush())
        finally:
            connection.close()

    workers = [threading.Thread(target=flush) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)

    assert len(written) == 4 and sum(written) == 6
    assert usage_events_flush() == 0
    emitted = events(*tenants)
    assert len(emitted) == 6
    assert sorted((e.group_id, e.payload["units"]["tokens_in"]) for e in emitted) == sorted(
        (t.group_id, n) for t in tenants for n in (1, 2)
    )


def test_the_schema_refuses_an_event_missing_a_unit_or_counting_below_zero():
    from usage.services import event_schema_validator

    event = one_event()
    validator = event_schema_validator()
    missing = orjson.loads(orjson.dumps(event.payload))
    del missing["units"]["byok_tokens_out"]
    negative = orjson.loads(orjson.dumps(event.payload))
    negative["units"]["bytes_in"] = -1

    validator.validate(event.payload)
    with pytest.raises(ValidationError):
        validator.validate(missing)
    with pytest.raises(ValidationError):
        validator.validate(negative)


def test_the_schema_takes_events_from_before_the_uncollected_unit_and_refuses_it_negative():
    from usage.services import event_schema_validator

    event = one_event()
    validator = event_schema_validator()
    before = orjson.loads(orjson.dumps(event.payload))
    del before["units"]["uncollected_micro_usd"]  # as events were written before it
    negative = orjson.loads(orjson.dumps(event.payload))
    negative["units"]["uncollected_micro_usd"] = -1

    assert event.payload["units"]["uncollected_micro_usd"] == 0
    validator.validate(before)
    with pytest.raises(ValidationError):
        validator.validate(negative)


# ---------------------------------------------------------------- delivery


class Webhook:
    """A tiny local HTTP receiver that answers scripted statuses and keeps what it got."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.received: list[tuple[dict, bytes]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = owner.statuses.pop(0) if owner.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/usage"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    servers: list[Webhook] = []

    def start(*statuses: int) -> Webhook:
        servers.append(Webhook(list(statuses)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


SECRET = "sink-secret-for-tests"


def one_event():
    from usage.services import usage_events_flush

    tenant = make_tenant()
    store(platform_row(tenant, tokens_in=9))
    age_rows(HOUR, tenant)
    usage_events_flush()
    [event] = events(tenant)
    return event


def test_webhook_gets_a_signed_body_and_failures_retry_with_backoff(webhook):
    from core.sinks import WebhookSink
    from usage.models import UsageEvent
    from usage.services import usage_events_deliver

    receiver = webhook(500, 503)
    sink = WebhookSink(url=receiver.url, secret=SECRET)
    event = one_event()
    now = datetime.now(UTC)

    first = usage_events_deliver(now=now, sink=sink)
    event.refresh_from_db()
    assert (first.retrying, event.delivery, event.delivery_attempts, event.last_error) == (
        1,
        "pending",
        1,
        "usage webhook answered 500",
    )
    assert event.next_attempt_at == now + timedelta(seconds=30)
    assert usage_events_deliver(now=now + timedelta(seconds=29), sink=sink).retrying == 0
    assert usage_events_deliver(now=now + timedelta(seconds=30), sink=sink).retrying == 1
    event.refresh_from_db()
    assert event.next_attempt_at == now + timedelta(seconds=30 + 60)
    third = usage_events_deliver(now=now + timedelta(seconds=90), sink=sink)

    event.refresh_from_db()
    assert (third.delivered, event.delivery, event.delivery_attempts, event.last_error) == (
        1,
        UsageEvent.Delivery.DELIVERED,
        3,
        "",
    )
    assert event.delivered_at is not None
    assert len(receiver.received) == 3
    headers, body = receiver.received[-1]
    assert orjson.loads(body) == event.payload
    expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["x-tollgate-signature"] == f"sha256={expected}"
    assert headers["x-tollgate-event-id"] == event.payload["event_id"]
    assert usage_events_deliver(now=now + HOUR, sink=sink).delivered == 0


def test_a_refused_webhook_fails_the_event_until_an_operator_queues_it_again(webhook):
    from core.sinks import WebhookSink
    from usage.services import usage_events_deliver, usage_events_redeliver

    receiver = webhook(400)
    sink = WebhookSink(url=receiver.url, secret=SECRET)
    event = one_event()

    assert usage_events_deliver(sink=sink).failed == 1
    event.refresh_from_db()
    assert (event.delivery, event.delivery_attempts, event.next_attempt_at) == ("failed", 1, None)
    assert usage_events_deliver(now=datetime.now(UTC) + HOUR, sink=sink).failed == 0

    assert usage_events_redeliver(event_ids=[event.pk]) == 1
    assert usage_events_deliver(sink=sink).delivered == 1
    assert len(receiver.received) == 2


def test_an_unreachable_webhook_gives_up_after_the_last_try():
    from core.sinks import MAX_DELIVERY_ATTEMPTS, WebhookSink, backoff_s
    from usage.services import usage_events_deliver

    sink = WebhookSink(url="http://127.0.0.1:9/nothing-listens-here", secret=SECRET)
    event = one_event()
    now = datetime.now(UTC)

    for attempt in range(1, MAX_DELIVERY_ATTEMPTS + 1):
        usage_events_deliver(now=now, sink=sink)
        event.refresh_from_db()
        assert event.delivery_attempts == attempt
        now += timedelta(seconds=backoff_s(attempt))

    assert (event.delivery, event.last_error) == (
        "failed",
        "ConnectError posting to the usage webhook",
    )
    assert [backoff_s(n) for n in (1, 2, 3, 7, 8, 10)] == [30, 60, 120, 1920, 3600, 3600]


@requires_postgres
def test_two_senders_at_once_deliver_each_event_once(webhook):
    from core.sinks import WebhookSink
    from usage.services import usage_events_deliver, usage_events_flush

    tenants = [make_tenant() for _ in range(5)]
    store(*[platform_row(t, tokens_in=1) for t in tenants])
    age_rows(HOUR, *tenants)
    usage_events_flush()
    receiver = webhook()
    sink = WebhookSink(url=receiver.url, secret=SECRET)
    start = threading.Barrier(2)

    def send() -> None:
        start.wait()
        try:
            usage_events_deliver(sink=sink)
        finally:
            connection.close()

    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(30)

    sent_ids = sorted(headers["x-tollgate-event-id"] for headers, _ in receiver.received)
    assert sent_ids == sorted(e.payload["event_id"] for e in events(*tenants))
    assert {e.delivery for e in events(*tenants)} == {"delivered"}


def test_the_log_sink_is_the_default_and_counts_as_delivered(caplog):
    from core.sinks import LogSink, WebhookSink, configured_sink
    from usage.services import usage_events_deliver

    event = one_event()

    with caplog.at_level("INFO", logger="core.sinks"):
        assert isinstance(configured_sink(), LogSink)
        assert usage_events_deliver().delivered == 1

    event.refresh_from_db()
    assert event.delivery == "delivered"
    [line] = [r.getMessage() for r in caplog.records if r.name == "core.sinks"]
    assert line.startswith(f"usage event {event.payload['event_id']} {{")
    with override_settings(
        TOLLGATE={
            **settings.TOLLGATE,
            "USAGE_SINK_URL": "http://sink.invalid",
            "USAGE_SINK_SECRET": SECRET,
        }
    ):
        assert isinstance(configured_sink(), WebhookSink)
