"""The dashboard's receipts: a month's receipts newest first under its statement, each
request's receipts with what they say and the material to verify them, and downloads (a
request's receipts as the API answers them, the month's signed statement, the month's
receipts as JSON lines for `manage.py verify_receipts --file`, and both chains' heads signed
now, for `verify_receipts --head` and `verify_audit --head`).

Reads go through billing/statements.py, scoped to the seat's account like every page here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit import heads
from audit.services import signed_audit_head
from billing import statements
from billing.models import Receipt
from billing.receipts import signed_receipt_head
from core.errors import REFUSAL_CODES
from dashboard import selectors
from dashboard.access import Seat, require_change, seat_of

PAGE_SIZE = 50
EXPORT_PAGE = 1_000
PAGE_MARKS = ("older", "newer")


def _page(request: HttpRequest, seat: Seat, template: str, **context) -> HttpResponse:
    # Times read in the account's own zone, the one its months are cut in.
    with timezone.override(selectors.account_zone(seat.account)):
        return render(request, template, {"seat": seat, "account": seat.account, **context})


def _period(request: HttpRequest, seat: Seat) -> tuple[str, str]:
    """The month asked for (this month if none), and what was wrong with the one asked for."""
    zone = seat.account.time_zone
    asked = request.GET.get("period", "")
    if asked:
        try:
            statements.month_bounds(asked, time_zone=zone)
        except ValueError as exc:
            return statements.month_of(timezone.now(), time_zone=zone), f"{asked!r}: {exc}."
        return asked, ""
    return statements.month_of(timezone.now(), time_zone=zone), ""


@dataclass(frozen=True)
class ReceiptRow:
    """A receipt as a line of the month's table: what its body says, read once."""

    receipt: Receipt
    model: str
    paid_by: str
    error_code: str = ""

    @property
    def total_micro(self) -> int:
        return self.receipt.cost_micro + self.receipt.bandwidth_micro

    @property
    def refused(self) -> bool:
        """A charge receipt of a request the gateway refused: it proves nothing was charged,
        so it is listed as a refusal, not as a $0.00 charge (its signed body is unchanged)."""
        return (
            self.receipt.kind == Receipt.Kind.CHARGE
            and self.error_code in REFUSAL_CODES
            and not self.total_micro
        )


def _row(receipt: Receipt) -> ReceiptRow:
    body = orjson.loads(receipt.body)
    return ReceiptRow(
        receipt=receipt,
        model=body.get("model_served") or body.get("model_requested") or "",
        paid_by=body.get("paid_by") or "",
        error_code=body.get("error_code") or "",
    )


@dataclass(frozen=True)
class MarkPage:
    """Rows of a table paged by seq: `newer` / `older` are the marks of the pages around."""

    rows: list[ReceiptRow]
    newer: str | None
    older: str | None


def _mark(request: HttpRequest, name: str) -> int | None:
    text = request.GET.get(name, "")
    return int(text) if text.isdigit() else None


@login_required
def receipts(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    period, error = _period(request, seat)
    start, end = statements.month_bounds(period, time_zone=seat.account.time_zone)
    older, newer = _mark(request, "older"), _mark(request, "newer")
    window = partial(
        statements.chain_page, account_id=seat.account.pk, start=start, end=end, limit=PAGE_SIZE + 1
    )
    if newer is not None:  # the page above a mark: read upwards, shown newest first
        found = window(after_seq=newer)
        more_newer, found = len(found) > PAGE_SIZE, found[:PAGE_SIZE][::-1]
        more_older = True
    else:
        found = window(before_seq=older, newest_first=True)
        more_older, found = len(found) > PAGE_SIZE, found[:PAGE_SIZE]
        more_newer = older is not None
    page = MarkPage(
        rows=[_row(r) for r in found],
        newer=str(found[0].seq) if found and more_newer else None,
        older=str(found[-1].seq) if found and more_older else None,
    )
    before, after = statements.months_around(period)
    this_month = statements.month_of(timezone.now(), time_zone=seat.account.time_zone)
    return _page(
        request,
        seat,
        "dashboard/receipts.html",
        page=page,
        period=period,
        error=error,
        month_before=before,
        month_after=after if after <= this_month else None,
        statement=statements.statement(account=seat.account, period=period, now=timezone.now()),
        query_string=f"period={period}",
    )


def _request_receipts(seat: Seat, request_id: str) -> list[dict[str, Any]]:
    found = statements.request_receipts(account_ids=[seat.account.pk], request_id=request_id)
    if not found:
        raise Http404("No receipt of that request.")
    return found


@login_required
def receipt_detail(request: HttpRequest, account_id: int, request_id: str) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    found = _request_receipts(seat, request_id)
    groups = {g.pk: g.name for g in selectors.groups_of_account(account=seat.account)}
    keys = {
        k.pk: f"{k.prefix}… {k.name}".strip()
        for k in selectors.api_keys_of_account(account=seat.account)
    }
    return _page(
        request,
        seat,
        "dashboard/receipt_detail.html",
        request_id=request_id,
        receipts=[
            {
                **r,
                "settled": parse_datetime(r["settled_at"]),
                "prices": _prices(r["document"].get("prices") or {}),
                "group_name": groups.get(r["document"].get("group_id")),
                "key_name": keys.get(r["document"].get("api_key_id")),
                "signed_by": next((p for p in [r, *r["proof"]] if p["signature"]), None),
            }
            for r in found
        ],
    )


def _prices(prices: dict[str, int]) -> list[tuple[str, int]]:
    """Prices for people: "input_micro_per_mtok" reads "input, per million tokens"."""
    named = []
    for name, micro in sorted(prices.items()):
        words = name.removesuffix("_micro_per_mtok").removesuffix("_micro").replace("_", " ")
        unit = "per million tokens" if name.endswith("_per_mtok") else "each"
        named.append((f"{words}, {unit}", micro))
    return named


def _download(data: Any, filename: str) -> HttpResponse:
    response = JsonResponse(data, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
def receipt_json(request: HttpRequest, account_id: int, request_id: str) -> HttpResponse:
    """The request's receipts exactly as GET /api/receipts/{request_id} answers them."""
    seat = seat_of(user=request.user, account_id=account_id)
    found = _request_receipts(seat, request_id)
    return _download({"request_id": request_id, "results": found}, f"receipts-{request_id}.json")


@login_required
def statement_json(request: HttpRequest, account_id: int) -> HttpResponse:
    seat = seat_of(user=request.user, account_id=account_id)
    period, error = _period(request, seat)
    if error:
        return HttpResponse(f"Bad period: {error}", status=400)
    signed = statements.statement(account=seat.account, period=period, now=timezone.now())
    return _download(signed, f"statement-{seat.account.pk}-{period}.json")


@login_required
def receipts_head_json(request: HttpRequest, account_id: int) -> HttpResponse:
    """The receipt chain's head, signed now: what `verify_receipts --head` holds it against."""
    seat = seat_of(user=request.user, account_id=account_id)
    signed = heads.document(signed_receipt_head(seat.account.pk))
    return _download(signed, f"receipts-head-{seat.account.pk}-{signed['seq']}.json")


@login_required
def audit_head_json(request: HttpRequest, account_id: int) -> HttpResponse:
    """The audit chain's head, signed now, for its owners and admins (as the trail)."""
    seat = seat_of(user=request.user, account_id=account_id)
    require_change(seat)
    signed = heads.document(signed_audit_head(seat.account.pk))
    return _download(signed, f"audit-head-{seat.account.pk}-{signed['seq']}.json")


@login_required
def receipts_jsonl(request: HttpRequest, account_id: int) -> HttpResponse | StreamingHttpResponse:
    """The month's receipts in chain order, one JSON object a line, streamed."""
    seat = seat_of(user=request.user, account_id=account_id)
    period, error = _period(request, seat)
    if error:
        return HttpResponse(f"Bad period: {error}", status=400)
    start, end = statements.month_bounds(period, time_zone=seat.account.time_zone)
    lines = _jsonl(seat.account.pk, start, end)
    response = StreamingHttpResponse(lines, content_type="application/jsonl")
    response["Content-Disposition"] = (
        f'attachment; filename="receipts-{seat.account.pk}-{period}.jsonl"'
    )
    return response


async def _jsonl(account_id: int, start: datetime, end: datetime) -> AsyncIterator[str]:
    """The receipts settled in [start, end) a page at a time (flat memory whatever the month):
    under ASGI an async iterator, each page read in the request's own thread."""
    read = sync_to_async(statements.chain_page, thread_sensitive=True)
    after = 0
    while True:
        page = await read(
            account_id=account_id, after_seq=after, start=start, end=end, limit=EXPORT_PAGE
        )
        yield "".join(json.dumps(statements.receipt_record(r)) + "\n" for r in page)
        if len(page) < EXPORT_PAGE:
            return
        after = page[-1].seq
