"""Usage rows: waiting for the ones gateways store, making the ones a gateway journals, and
raw requests with exact byte counts."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import orjson
from django.core.management import call_command

from tests.support.tenants import Tenant
from tests.support.waits import wait_until

GB_RATE_ONE_MICRO_PER_BYTE = 1_000_000_000  # 10^9 micro-USD per GB: the charge is the bytes


def chat(
    url: str,
    tenant: Tenant,
    body: dict,
    *,
    headers: dict | None = None,
    path: str = "/v1/chat/completions",
) -> tuple[httpx.Response, bytes]:
    """POST a body we serialised ourselves (so its byte count is known); return both."""
    content = orjson.dumps(body)
    response = httpx.post(
        f"{url}{path}",
        content=content,
        timeout=30,
        headers={
            "Authorization": f"Bearer {tenant.api_key}",
            "Content-Type": "application/json",
            **(headers or {}),
        },
    )
    return response, content


def set_bandwidth_rate(tenant: Tenant, micro_per_gb: int = GB_RATE_ONE_MICRO_PER_BYTE) -> None:
    from accounts.models import Group

    Group.objects.filter(pk=tenant.group_id).update(bandwidth_micro_usd_per_gb=micro_per_gb)


def database_dump() -> str:
    """Every row of every table Tollgate keeps, as JSON text (a database dump)."""
    out = io.StringIO()
    call_command("dumpdata", stdout=out)
    return out.getvalue()


def journal_row(
    *,
    group_id: int,
    account_id: int,
    api_key_id: int | None = None,
    request_id: str | None = None,
    created_at: datetime | None = None,
    **fields,
) -> dict:
    """A usage record's journal form, as a gateway journals it (gateway.recording.usage_record)."""
    row = {
        "request_id": request_id or f"req-{uuid.uuid4().hex}",
        "client_request_id": "",
        "created_at": (created_at or datetime.now(UTC)).isoformat(),
        "account_id": account_id,
        "group_id": group_id,
        "api_key_id": api_key_id,
        "caller_label": "",
        "endpoint": "chat",
        "model_requested": "gpt-4o-mini",
        "model_served": "gpt-4o-mini",
        "provider": "stub-openai",
        "served_by": "platform",
        "tokens_in": 0,
        "tokens_out": 0,
        "byok_tokens_in": 0,
        "byok_tokens_out": 0,
        "provider_cost_micro": 0,
        "bytes_in": 0,
        "bytes_out": 0,
        "bandwidth_charge_micro": 0,
        "upstream_sent": True,
        "status": 200,
        "error_code": "",
        "latency_ms": 12,
        "ttft_ms": None,
        "streamed": False,
        "reservation_id": None,
        "attempts": [],
    }
    row.update(fields)
    return row


def attempt(order: int = 1, **fields) -> dict:
    """One attempt of a journaled row's trail: served on the platform unless `fields` say."""
    return {
        "order": order,
        "provider": "stub-openai",
        "model": "gpt-4o-mini",
        "served_by": "platform",
        "source": "platform",
        "outcome": "ok",
        "upstream_status": 200,
        "latency_ms": 9,
        "reservation_id": None,
        **fields,
    }


def store(*rows: dict) -> None:
    """Store journaled rows the way every flusher does (JSON round trip included)."""
    from core.usage_record import UsageRecord
    from usage.writer import store_rows

    store_rows([UsageRecord.from_json(orjson.dumps(row)) for row in rows])


def after_windows(*, windows: int = 1) -> datetime:
    """A `now` by which every row stored so far sits in a closed window (grace included)."""
    from django.conf import settings

    window_s = settings.TOLLGATE["USAGE_WINDOW_S"]
    grace_s = settings.TOLLGATE["USAGE_GRACE_S"]
    return datetime.now(UTC) + timedelta(seconds=windows * window_s + grace_s + 1)


def usage_rows(
    request_ids: list[str] | None = None, *, group_id: int | None = None, expect: int | None = None
):
    """Return usage rows in the order their requests ended (waiting for the batched writer
    to store `expect` of them).

    Filter by request ids or group: rows of an earlier test may land late in a shared gateway.
    Ordered by when each record was made, not by row id: every gateway on the test Redis reads
    the one usage journal, so another test's gateway may store an earlier request's row after
    this one stores a later one's.
    """
    from django.db.models import Q

    from usage.models import UsageLog

    assert request_ids is not None or group_id is not None, "filter by request ids or group"

    def rows():
        qs = UsageLog.objects.order_by("created_at", "id")
        if request_ids is not None:
            qs = qs.filter(Q(client_request_id__in=request_ids) | Q(request_id__in=request_ids))
        if group_id is not None:
            qs = qs.filter(group_id=group_id)
        found = list(qs)
        return found if expect is None or len(found) >= expect else None

    return wait_until(rows, timeout_s=15, what=f"{expect} usage rows")


def settled(tenant: Tenant, count: int) -> list:
    """Wait for the tenant's `count` usage rows and for nothing of it to be held any more."""
    from billing.models import Reservation, SpendHold

    rows = usage_rows(group_id=tenant.group_id, expect=count)
    wait_until(
        lambda: (
            not SpendHold.objects.filter(group_id=tenant.group_id, status="held").exists()
            and not Reservation.objects.filter(
                wallet__account_id=tenant.account_id, status="pending"
            ).exists()
        ),
        what="holds to settle",
    )
    return rows


def streamed_body(response) -> bytes:
    """The whole body of a streamed response from Django's test client: an export streams
    from an async iterator, read here in the test's own thread (and its database connection)."""
    from asgiref.sync import async_to_sync

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)()
