"""Idempotency keys: `Idempotency-Key` on the /v1 POSTs makes two requests one (Stripe-like).

A key is scoped to the account and lives `TOLLGATE_IDEMPOTENCY_TTL_S` (24 h) from its first
use. The request fingerprint is SHA-256 of the endpoint and the raw body bytes, so the same key
on the other endpoint is another body. The first request to claim a key runs; what follows:

- same body, answer stored: the stored status, content headers and body bytes are replayed
  (a stream byte for byte), with `Idempotent-Replayed: true`; no upstream call, no limit
  slot, no charge, no usage row.
- another body: 409 LM-2009 (`x-should-retry: false`, so the SDKs do not retry it).
- same body, still running: 409 LM-2009 with `Retry-After: 1` (`x-should-retry: true`): the
  official SDKs retry it by themselves and then get the replay. We answer instead of
  waiting so a duplicate holds no connection, slot or database session meanwhile.

What is stored: an answer that reached the vendor and went out as HTTP 200 (a stream that
broke after it started too, with its error event: the client saw and paid for it). What
frees the key instead, so a retry with it runs: every refusal before the vendor (auth was
before the claim; validation, limits, budget, wallet, chain lock), an upstream failure
answered as an error status (nothing was served; only its bandwidth was billed), and a stream
cut off by the client leaving. A non-streamed answer whose client left is still stored: the
retry gets it without paying twice. An answer over `TOLLGATE_IDEMPOTENCY_MAX_BYTES` is served
and remembered as too large: a duplicate gets 409 LM-2009 rather than a second charge.

The claim is one short transaction on the money path's driver (async psycopg on PostgreSQL,
the database thread on SQLite); it also deletes a few expired records, so the table needs no
periodic sweep. A running record older than the request deadline plus a margin was left by a
gateway that died: the same body takes it over. If the database cannot be reached, a keyed
request is refused with LM-5004 rather than run without its guarantee.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import timedelta

import orjson
from django.utils import timezone

from billing.escrow import DB_ERRORS
from core import errors, metrics
from core.config import tollgate
from gateway.context import RequestContext
from gateway.runtime import runtime

log = logging.getLogger(__name__)

HEADER = b"idempotency-key"
KEY_OK = re.compile(rb"[\x20-\x7e]{1,255}")
TABLE = "gateway_idempotency"
ABANDON_MARGIN_S = 60  # past the request deadline, a running record's gateway is gone
SWEEP_ROWS = 4  # expired records deleted per claim: more than one claim adds
REPLAYED_HEADERS = frozenset({b"content-type", b"cache-control"})
RUNNING, DONE, TOO_LARGE = "running", "done", "too_large"


@dataclass(frozen=True, slots=True)
class Stored:
    request_id: str
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


# ---------------------------------------------------------------- SQL programs


def claim_program(
    *, account_id: int, key: str, fingerprint: str, request_id: str, now, sweep_locked: bool
):
    """Claim the key (first use, expired or abandoned), else return the record as it is.

    Returns ("claimed", record id), ("found", row) or ("gone", None) when the record was
    released between the insert and the read.
    """
    expires = now + timedelta(seconds=tollgate().idempotency_ttl_s)
    row = yield (
        f"INSERT INTO {TABLE} (account_id, key, fingerprint, state, request_id, status,"
        " headers, body, created_at, expires_at)"
        " VALUES (%s, %s, %s, %s, %s, NULL, '', NULL, %s, %s)"
        " ON CONFLICT (account_id, key) DO NOTHING RETURNING id",
        (account_id, key, fingerprint, RUNNING, request_id, now, expires),
    )
    if row is not None:
        skip = " FOR UPDATE SKIP LOCKED" if sweep_locked else ""
        yield (
            f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} WHERE expires_at <= %s"
            f" ORDER BY expires_at LIMIT {SWEEP_ROWS}{skip}) RETURNING id",
            (now,),
        )
        return "claimed", row[0]
    abandoned = now - timedelta(seconds=tollgate().request_deadline_s + ABANDON_MARGIN_S)
    row = yield (
        f"UPDATE {TABLE} SET fingerprint = %s, state = %s, request_id = %s, status = NULL,"
        " headers = '', body = NULL, created_at = %s, expires_at = %s"
        " WHERE account_id = %s AND key = %s AND (expires_at <= %s"
        " OR (state = %s AND fingerprint = %s AND created_at < %s)) RETURNING id",
        (
            fingerprint,
            RUNNING,
            request_id,
            now,
            expires,
            account_id,
            key,
            now,
            RUNNING,
            fingerprint,
            abandoned,
        ),
    )
    if row is not None:
        return "claimed", row[0]
    row = yield (
        f"SELECT fingerprint, state, request_id, status, headers, body FROM {TABLE}"
        " WHERE account_id = %s AND key = %s",
        (account_id, key),
    )
    return ("gone", None) if row is None else ("found", row)


def store_program(*, record_id: int, request_id: str, state: str, status: int, headers, body):
    return (
        yield (
            f"UPDATE {TABLE} SET state = %s, status = %s, headers = %s, body = %s"
            " WHERE id = %s AND request_id = %s AND state = %s RETURNING id",
            (state, status, headers, body, record_id, request_id, RUNNING),
        )
    )


def release_program(*, record_id: int, request_id: str):
    return (
        yield (
            f"DELETE FROM {TABLE} WHERE id = %s AND request_id = %s AND state = %s RETURNING id",
            (record_id, request_id, RUNNING),
        )
    )


# ---------------------------------------------------------------- the request's claim


class Claim:
    """A request's hold on its key: keeps the answer as it goes out, stores it once."""

    __slots__ = ("record_id", "ctx", "status", "headers", "parts", "size", "overflow", "open")

    def __init__(self, record_id: int, ctx: RequestContext) -> None:
        self.record_id = record_id
        self.ctx = ctx
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.parts: list[bytes] = []
        self.size = 0
        self.overflow = False
        self.open = True

    def on_start(self, status: int, headers) -> None:
        self.status = status
        self.headers = [(k, v) for k, v in headers if k in REPLAYED_HEADERS]

    async def on_body(self, data: bytes, *, more: bool) -> None:
        """Keep a part of the answer; with the last one, conclude the key before it goes out.

        Stored before the client sees the end, so its next request finds the answer.
        """
        if not self.overflow:
            self.size += len(data)
            if self.size > tollgate().idempotency_max_bytes:
                self.overflow, self.parts = True, []
            else:
                self.parts.append(data)
        if not more:
            await self.conclude()

    def replayable(self) -> bool:
        ctx = self.ctx
        return ctx.meter.upstream_sent and self.status == 200 and ctx.status != 499

    async def conclude(self) -> None:
        if not self.open:
            return
        if not self.replayable():
            await self.release()
            return
        headers = orjson.dumps(
            [[k.decode("latin-1"), v.decode("latin-1")] for k, v in self.headers]
        )
        program = store_program(
            record_id=self.record_id,
            request_id=self.ctx.request_id,
            state=TOO_LARGE if self.overflow else DONE,
            status=self.status,
            headers=headers.decode(),
            body=None if self.overflow else b"".join(self.parts),
        )
        self.parts = []
        try:
            await runtime.db.run(program)
        except DB_ERRORS:
            # The record stays running: duplicates get 409 until it counts as abandoned.
            log.error("could not store the answer of idempotency record %s", self.record_id)
        # Closed only now: if the store was cancelled, the request's last step releases.
        self.open = False

    async def release(self) -> None:
        """Free the key: nothing that a retry should not repeat was served."""
        if not self.open:
            return
        self.parts = []
        try:
            await runtime.db.run(
                release_program(record_id=self.record_id, request_id=self.ctx.request_id)
            )
        except DB_ERRORS:
            log.error("could not release idempotency record %s", self.record_id)
        self.open = False


def fingerprint(endpoint: str, body: bytes) -> str:
    return hashlib.sha256(endpoint.encode() + b"\n" + body).hexdigest()


async def begin(ex, ctx: RequestContext, body: bytes) -> bool:
    """Claim the request's key (the exchange then keeps its answer), or replay the stored one.

    Returns True when the answer was replayed; raises errors.IdempotencyConflict (LM-2009).
    """
    raw = ex.headers[HEADER]
    if not KEY_OK.fullmatch(raw):
        raise errors.InvalidRequest("Idempotency-Key must be 1 to 255 printable ASCII characters.")
    assert ctx.principal is not None  # keys are per account: the claim comes after auth
    params = {
        "account_id": ctx.principal.account_id,
        "key": raw.decode("ascii"),
        "fingerprint": fingerprint(ctx.endpoint, body),
        "request_id": ctx.request_id,
        "sweep_locked": runtime.db.pg is not None,  # PostgreSQL: skip swept rows locked
    }
    for _ in range(3):
        try:
            outcome, found = await runtime.db.run(claim_program(now=timezone.now(), **params))
        except DB_ERRORS:
            raise errors.DependencyDown() from None
        if outcome == "claimed":
            ex.idem = Claim(found, ctx)
            return False
        if outcome == "found":
            await answer_duplicate(ex, ctx, params["fingerprint"], found)
            return True
    # Released and claimed again under us three times: as good as in progress.
    raise errors.IdempotencyConflict(
        "A request with this Idempotency-Key is in progress.", in_progress=True
    )


async def answer_duplicate(ex, ctx: RequestContext, given_fingerprint: str, row: tuple) -> None:
    fp, state, request_id, status, headers, body = row
    if fp != given_fingerprint:
        raise errors.IdempotencyConflict()
    if state == RUNNING:
        raise errors.IdempotencyConflict(
            "A request with this Idempotency-Key is in progress; retry shortly.", in_progress=True
        )
    if state == TOO_LARGE:
        raise errors.IdempotencyConflict(
            "The answer to this Idempotency-Key was served but is too large to replay."
        )
    stored = Stored(
        request_id=request_id,
        status=status,
        headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in orjson.loads(headers)],
        body=bytes(body),
    )
    await replay(ex, ctx, stored)


async def replay(ex, ctx: RequestContext, stored: Stored) -> None:
    """Send the stored answer again: same status, same bytes; nothing is called or charged."""
    await ex.start(
        stored.status,
        [
            *stored.headers,
            (b"idempotent-replayed", b"true"),
            (b"x-tollgate-original-request-id", stored.request_id.encode()),
        ],
    )
    await ex.body(stored.body, more=False)
    metrics.labeled(metrics.REQUESTS, ctx.endpoint, str(stored.status), "replayed").inc()
