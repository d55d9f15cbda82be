"""Usage rows leave the request path in batches, and survive a killed gateway.

With Redis, each finished request is journaled (one XADD, before the client sees the end
of its answer) to a Redis stream; every replica's flusher reads the stream through a
consumer group and bulk-inserts rows, acknowledging them only after the insert commits.
Entries a dead replica read but never acknowledged are claimed by the survivors (and by the
Celery drain task) after TOLLGATE_USAGE_CLAIM_IDLE_MS. Both read the stream with one
consumer, `consume_journal`, written once as a program of steps: the flusher runs it on the
event loop (Redis through SharedState, the database off the loop), the drain task with a
plain Redis client. Without Redis (embedded runs) rows wait in memory. Every replica flushes
every TOLLGATE_USAGE_FLUSH_MS. Inserts skip request ids already stored, so a replay never
duplicates a row; each row gets `stored_at`, the time it reached the database, which is what
usage events and reconciliation walk.

No row holds back another. A batch the database refuses for a row's content is stored again
one row at a time, each with its settlement; a row that still fails DEAD_AFTER_TRIES times
(or a journal entry that is not a row at all) moves to the dead-letter table (UsageDeadLetter,
counted by tollgate_usage_dead_letters_total) and leaves the journal. A database that is down
is no row's fault: then everything stays in the journal for the next flush, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from django.db import DataError, IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from redis.exceptions import ResponseError

from billing.settlement import settle_rows
from core import bus
from core.config import tollgate
from core.db import off_loop
from core.metrics import USAGE_DEAD_LETTERS
from core.shared_state import SharedState, SharedStateDown
from core.usage_record import UsageRecord
from usage.crash_rows import true_up_rows
from usage.models import UsageDeadLetter
from usage.rollups import add_to_rollups
from usage.rows import clean_record, clean_text
from usage.storage import insert_new

log = logging.getLogger(__name__)

JOURNAL = "tollgate:usage:journal"
GROUP = "writers"
BATCH = 500
DEAD_AFTER_TRIES = 3
# What a row's content makes the database (or the model layer before it) refuse. Anything
# else, above all OperationalError / InterfaceError (the database is down) and
# ProgrammingError (the schema is out of step), is not the row's fault: nothing is
# dead-lettered then, and the rows wait in the journal.
ROW_ERRORS = (DataError, IntegrityError, ValueError, TypeError, KeyError)


def flush_every_s() -> float:
    return tollgate().usage_flush_ms / 1000


def claim_idle_ms() -> int:
    """How long a journal entry read by a replica may stay unacknowledged before others take it."""
    return tollgate().usage_claim_idle_ms


def store_rows(records: list[UsageRecord]) -> int:
    """Insert usage records with their attempts, skipping request ids already stored."""
    stored = 0
    for start in range(0, len(records), BATCH):
        stored += _store_rows(records[start : start + BATCH])
    return stored


def _store_rows(records: list[UsageRecord]) -> int:
    records = [clean_record(r) for r in records]  # a guard: rows journaled before cleaning
    by_id = {record.request_id: record for record in records}
    with transaction.atomic():
        stored_at = timezone.now()
        ids = insert_new(list(by_id.values()), stored_at=stored_at)
        fresh = [record for rid, record in by_id.items() if rid in ids]
        add_to_rollups(fresh)  # rollups in the rows' transaction: always equal to them
        trued = settle_rows(fresh, now=stored_at)  # a stored row and its money: one transaction
        true_up_rows(fresh, trued)  # late rows replace what the reaper charged at the hold
    return len(fresh)


@dataclass(frozen=True)
class Refused:
    """A journal entry the database would not take, on its way to the dead-letter table."""

    request_id: str
    raw: str
    error: str
    tries: int


def refused(entry: UsageRecord | bytes | None, exc: Exception, *, tries: int) -> Refused:
    """Describe a refused record (or undecodable entry) in text the database always takes."""
    if isinstance(entry, UsageRecord):
        try:
            raw = entry.to_json().decode()
        except TypeError:  # not JSON-able (a lone surrogate, say): keep Python's picture
            raw = repr(entry)
        request_id = entry.request_id
    else:
        raw = (entry or b"").decode("utf-8", "backslashreplace")
        try:
            request_id = orjson.loads(entry or b"").get("request_id")
        except Exception:
            request_id = None
    return Refused(
        request_id=clean_text(request_id, 64) if isinstance(request_id, str) else "",
        raw=raw.replace("\x00", "\\u0000"),  # PostgreSQL text cannot hold NUL
        error=clean_text(f"{type(exc).__name__}: {exc}", 500),
        tries=tries,
    )


def store_journaled(entries: Sequence[UsageRecord | bytes | None]) -> int:
    """Store journal entries' rows; dead-letter what cannot be decoded or stored.

    An entry is its JSON, or the record itself when this process journaled it (UsageWriter:
    the same record, not decoded again).

    Returns the rows stored. Raises, dead-lettering nothing, when the database fails for
    reasons of its own: the caller keeps every entry for the next flush.
    """
    records: list[UsageRecord] = []
    bad: list[Refused] = []
    for entry in entries:
        if isinstance(entry, UsageRecord):
            records.append(entry)
            continue
        try:
            # None: an entry without a row, which raises TypeError there (dead-lettered below).
            records.append(UsageRecord.from_json(entry))  # type: ignore[arg-type]  # see above
        except ROW_ERRORS as exc:  # orjson.JSONDecodeError is a ValueError
            bad.append(refused(entry, exc, tries=1))
    return store_or_dead_letter(records, refused_already=bad)


def store_or_dead_letter(
    rows: list[UsageRecord], *, refused_already: list[Refused] | None = None
) -> int:
    """Store rows in one batch, else one at a time; dead-letter each that keeps failing.

    Returns the rows stored (those already stored are skipped). Raises when the database
    fails for reasons of its own; rows stored one at a time before that stay stored, and a
    replay skips them.
    """
    bad = list(refused_already or ())
    try:
        stored = store_rows(rows)
    except ROW_ERRORS as exc:
        log.warning("usage batch of %d rows refused (%s): storing them one by one", len(rows), exc)
        stored = 0
        for row in rows:
            count, error = _store_alone(row)
            stored += count
            if error is not None:
                bad.append(refused(row, error, tries=DEAD_AFTER_TRIES))
    dead_letter(bad)
    return stored


def _store_alone(row: UsageRecord) -> tuple[int, Exception | None]:
    error = None
    for _ in range(DEAD_AFTER_TRIES):
        try:
            return _store_rows([row]), None  # its own transaction, its own settlement
        except ROW_ERRORS as exc:
            error = exc  # a duplicate-id race passes on the next try, which skips the id
    return 0, error


def dead_letter(bad: list[Refused]) -> None:
    """Keep refused rows in the dead-letter table (once each: a replay adds to its tries)."""
    if not bad:
        return
    now = timezone.now()
    with transaction.atomic():
        for item in bad:
            again = UsageDeadLetter.objects.filter(request_id=item.request_id, row=item.raw).update(
                tries=F("tries") + item.tries, error=item.error, last_tried_at=now
            )
            if not again:
                UsageDeadLetter.objects.create(
                    request_id=item.request_id,
                    row=item.raw,
                    error=item.error,
                    tries=item.tries,
                    created_at=now,
                    last_tried_at=now,
                )
    USAGE_DEAD_LETTERS.inc(len(bad))
    for item in bad:
        log.error(
            "usage row %s moved to the dead-letter table after %d tries: %s",
            item.request_id or "(no request id)",
            item.tries,
            item.error,
        )


class UsageWriter:
    # A record this process journaled is kept by its entry id until its flusher reads the
    # entry back, and stored as it is: decoding its JSON again was a fifth of a row's cost.
    # An entry another replica's flusher read never comes back here: kept at most this long,
    # and at most this many while the flusher waits on a slow database (~3 KB each).
    KEEP_JOURNALED_S = 10.0
    KEEP_JOURNALED_MAX = 20_000

    def __init__(self, shared: SharedState, clock: Callable[[], float] = time.monotonic) -> None:
        self._shared = shared
        self._buffer: list[UsageRecord] = []
        self._group_ready = False
        self._clock = clock
        self._journaled: dict[bytes, tuple[float, UsageRecord]] = {}  # entry id: (when, record)

    def journal_command(self, record: UsageRecord) -> tuple:
        """The Redis command that journals a record (sent with others: gateway/recording.py)."""
        return ("XADD", JOURNAL, "*", "row", record.to_json())

    def journaled(self, entry_id: bytes, record: UsageRecord) -> None:
        """Remember a record its journal command stored as `entry_id` (XADD's reply)."""
        kept = self._journaled
        if len(kept) >= self.KEEP_JOURNALED_MAX:
            del kept[next(iter(kept))]  # the oldest: its entry is decoded when read instead
        kept[entry_id] = (self._clock(), record)

    def _forget_old_journaled(self) -> None:
        kept = self._journaled
        expired = self._clock() - self.KEEP_JOURNALED_S
        while kept:
            entry_id = next(iter(kept))  # the oldest: ids are kept in the order journaled
            if kept[entry_id][0] >= expired:
                return
            del kept[entry_id]

    def _entries(self, step: StoreStep) -> list[UsageRecord | bytes | None]:
        """A batch's entries: the records this process journaled, the others' JSON."""
        out: list[UsageRecord | bytes | None] = []
        for entry_id, entry in zip(step.ids, step.entries, strict=True):
            own = self._journaled.pop(entry_id, None)
            out.append(own[1] if own is not None else entry)
        return out

    def keep(self, record: UsageRecord) -> None:
        """Buffer a record in memory (no Redis): flushed by this process's flusher."""
        self._buffer.append(record)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(flush_every_s())
            try:
                await self.flush()
            except Exception:
                log.exception("usage flush failed; rows kept for the next try")

    async def flush(self) -> None:
        self._forget_old_journaled()
        if self._buffer:
            rows, self._buffer = self._buffer, []
            try:
                await off_loop(store_or_dead_letter)(rows)
            except Exception:
                self._buffer[:0] = rows
                raise
        if self._shared.client is not None:
            try:
                await self._flush_journal()
            except SharedStateDown:
                pass

    async def _flush_journal(self) -> None:
        try:
            await self._drain_journal()
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._group_ready = False  # the stream was dropped (e.g. Redis restarted empty)

    async def _drain_journal(self) -> None:
        if not self._group_ready:
            await self._run(create_group())
            self._group_ready = True
        program = consume_journal(
            consumer=bus.REPLICA_ID, idle_ms=claim_idle_ms(), until_empty=False
        )
        await self._run(program)

    async def _run(self, program: JournalProgram) -> int:
        """Run a journal program: Redis through SharedState, the database off the loop."""
        reply: Any = None
        failure: Exception | None = None
        while True:
            try:
                step = program.throw(failure) if failure else program.send(reply)
            except StopIteration as done:
                return done.value
            reply, failure = None, None
            try:
                if isinstance(step, RedisStep):
                    reply = await self._shared.call(step.call)
                else:
                    reply = await off_loop(store_journaled)(self._entries(step))
            except Exception as exc:
                failure = exc


# ---------------------------------------------------------------- the journal's one consumer


@dataclass(frozen=True, slots=True)
class RedisStep:
    """One redis-py call on the journal: the same code for a plain client and an asyncio one."""

    call: Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class StoreStep:
    """Store journal entries' rows (store_journaled); the reply is the rows stored."""

    entries: list[bytes | None]
    ids: list[bytes]  # the entries' ids, in the same order


# A program yields steps, is sent each step's reply (or thrown its error) and returns the
# rows it stored; UsageWriter._run and run_journal_sync drive it.
JournalProgram = Generator[RedisStep | StoreStep, Any, int]


def create_group() -> JournalProgram:
    """Create the writers' consumer group (and the stream) unless it exists."""
    try:
        yield RedisStep(lambda r: r.xgroup_create(JOURNAL, GROUP, id="0", mkstream=True))
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):  # BUSYGROUP: it exists already
            raise
    return 0


def consume_journal(*, consumer: str, idle_ms: int, until_empty: bool) -> JournalProgram:
    """Move journaled rows into the database a batch at a time; return the rows stored.

    A batch is the consumer's new entries and those another consumer read but left
    unacknowledged for `idle_ms` (that reader is taken for dead). Entries are acknowledged and
    deleted once their rows are stored or dead-lettered; a database that is down raises and
    leaves them in the journal. The pass ends on a batch that finds nothing, or, unless
    `until_empty`, on one short of BATCH (the flusher comes back within USAGE_FLUSH_MS).
    """
    stored = 0
    while True:
        entries = yield RedisStep(
            lambda r: r.xreadgroup(GROUP, consumer, {JOURNAL: ">"}, count=BATCH)
        )
        messages = list(entries[0][1]) if entries else []
        claimed = yield RedisStep(
            lambda r: r.xautoclaim(JOURNAL, GROUP, consumer, idle_ms, "0-0", count=BATCH)
        )
        messages += list(claimed[1])
        if not messages:
            return stored
        rows = [(message_id, fields.get(b"row")) for message_id, fields in messages if fields]
        stored += yield StoreStep([row for _, row in rows], [message_id for message_id, _ in rows])
        ids = [message_id for message_id, _ in messages]
        # The default binds this batch's ids (B023); mypy cannot infer a lambda with a default.
        yield RedisStep(lambda r, ids=ids: r.xack(JOURNAL, GROUP, *ids))  # type: ignore[misc]  # above
        yield RedisStep(lambda r, ids=ids: r.xdel(JOURNAL, *ids))  # type: ignore[misc]  # above
        if not until_empty and len(messages) < BATCH:
            return stored


def run_journal_sync(program: JournalProgram, client: redis.Redis) -> int:
    """Run a journal program with a plain Redis client, in this thread."""
    reply: Any = None
    failure: Exception | None = None
    while True:
        try:
            step = program.throw(failure) if failure else program.send(reply)
        except StopIteration as done:
            return done.value
        reply, failure = None, None
        try:
            if isinstance(step, RedisStep):
                reply = step.call(client)
            else:
                reply = store_journaled(step.entries)
        except Exception as exc:
            failure = exc


def drain_journal_sync(
    redis_url: str, consumer: str = "celery-drain", *, idle_ms: int | None = None
) -> int:
    """Move every journaled row into the database (Celery task; also claims dead replicas').

    Entries another consumer read but has not acknowledged for `idle_ms` (default
    TOLLGATE_USAGE_CLAIM_IDLE_MS) are claimed: that reader is taken for dead.
    """
    idle_ms = claim_idle_ms() if idle_ms is None else idle_ms
    client = redis.Redis.from_url(redis_url)
    try:
        run_journal_sync(create_group(), client)
        program = consume_journal(consumer=consumer, idle_ms=idle_ms, until_empty=True)
        return run_journal_sync(program, client)
    finally:
        client.close()
