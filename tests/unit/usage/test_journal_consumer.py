"""The journal's one consumer (usage.writer.consume_journal), run by both of its drivers: the
gateway's flusher on the event loop and the Celery drain with a plain Redis client. A scripted
stream stands in for Redis and a list for the database."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ResponseError

from core.usage_record import UsageRecord
from tests.support.usage import journal_row
from usage import writer
from usage.writer import (
    BATCH,
    JOURNAL,
    UsageWriter,
    consume_journal,
    create_group,
    run_journal_sync,
)


class Stream:
    """The journal as a scripted list of reads: each (new entries, claimed entries)."""

    def __init__(self, *reads: tuple[list, list], busy: str = "") -> None:
        self.reads = list(reads)
        self.busy = busy  # the error XGROUP CREATE answers, if any
        self.commands: list[tuple] = []

    def xgroup_create(self, name, group, id, mkstream):
        self.commands.append(("XGROUP CREATE", name))
        if self.busy:
            raise ResponseError(self.busy)
        return True

    def xreadgroup(self, group, consumer, streams, count):
        self.commands.append(("XREADGROUP", consumer, count))
        new, _ = self.reads[0] if self.reads else ([], [])
        return [[JOURNAL.encode(), new]] if new else []

    def xautoclaim(self, name, group, consumer, idle_ms, start, count):
        self.commands.append(("XAUTOCLAIM", consumer, idle_ms, count))
        _, claimed = self.reads.pop(0) if self.reads else ([], [])
        return [b"0-0", claimed, []]

    def xack(self, name, group, *ids):
        self.commands.append(("XACK", *ids))
        return len(ids)

    def xdel(self, name, *ids):
        self.commands.append(("XDEL", *ids))
        return len(ids)


class AsyncStream:
    """The same stream behind an asyncio client's awaitable replies."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    def __getattr__(self, name):
        async def command(*args, **kwargs):
            return getattr(self.stream, name)(*args, **kwargs)

        return command


class Shared:
    """SharedState's `call`, minus timeouts and failure bookkeeping."""

    def __init__(self, stream: Stream) -> None:
        self.client = AsyncStream(stream)

    async def call(self, make_awaitable):
        return await make_awaitable(self.client)


def entries(*names: str) -> list[tuple[bytes, dict]]:
    return [(f"{name}-0".encode(), {b"row": name.encode()}) for name in names]


@pytest.fixture
def stored(monkeypatch) -> list[list]:
    """The database: each batch the consumer stored, in order."""
    batches: list[list] = []

    def store(rows):
        batches.append(rows)
        return len(rows)

    monkeypatch.setattr(writer, "store_journaled", store)
    return batches


def drain(stream: Stream) -> int:
    # Stream and Shared fake the few Redis calls the journal makes.
    run_journal_sync(create_group(), stream)  # type: ignore[arg-type]  # a fake Redis
    return run_journal_sync(
        consume_journal(consumer="celery-drain", idle_ms=15000, until_empty=True),
        stream,  # type: ignore[arg-type]  # a fake Redis
    )


def flush(stream: Stream) -> None:
    usage_writer = UsageWriter(Shared(stream))  # type: ignore[arg-type]  # a fake SharedState
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "claim_idle_ms", lambda: 15000)
        patch.setattr(writer.bus, "REPLICA_ID", "replica-1")
        asyncio.run(usage_writer._drain_journal())


def test_both_drivers_store_new_and_claimed_entries_then_ack_and_delete_them(stored):
    by_drain = Stream((entries("a", "b"), entries("c")))
    assert drain(by_drain) == 3
    drained = list(stored)
    stored.clear()
    by_flusher = Stream((entries("a", "b"), entries("c")))
    flush(by_flusher)

    assert drained == stored == [[b"a", b"b", b"c"]]
    for stream, consumer in ((by_drain, "celery-drain"), (by_flusher, "replica-1")):
        assert stream.commands[:5] == [
            ("XGROUP CREATE", JOURNAL),
            ("XREADGROUP", consumer, BATCH),
            ("XAUTOCLAIM", consumer, 15000, BATCH),
            ("XACK", b"a-0", b"b-0", b"c-0"),
            ("XDEL", b"a-0", b"b-0", b"c-0"),
        ]
    # The drain reads on until the journal is empty; the flusher stopped at a short batch.
    assert by_drain.commands[5:] == [
        ("XREADGROUP", "celery-drain", BATCH),
        ("XAUTOCLAIM", "celery-drain", 15000, BATCH),
    ]
    assert by_flusher.commands[5:] == []


def test_the_drain_reads_until_empty_and_the_flusher_stops_at_a_short_batch(stored):
    reads = [(entries("a"), []), (entries("b"), [])]
    by_drain, by_flusher = Stream(*reads), Stream(*reads)

    assert drain(by_drain) == 2
    flush(by_flusher)

    assert [c[0] for c in by_drain.commands].count("XREADGROUP") == 3  # the last finds nothing
    assert [c[0] for c in by_flusher.commands].count("XREADGROUP") == 1  # comes back soon
    assert stored == [[b"a"], [b"b"], [b"a"]]


def test_a_full_batch_keeps_the_flusher_reading(stored):
    full = entries(*[f"r{n}" for n in range(BATCH)])
    by_flusher = Stream((full, []), (entries("last"), []))

    flush(by_flusher)

    assert [len(batch) for batch in stored] == [BATCH, 1]


def test_a_database_that_fails_leaves_every_entry_in_the_journal(monkeypatch):
    def down(rows):
        raise ConnectionError("the database is down")

    monkeypatch.setattr(writer, "store_journaled", down)
    for run in (drain, flush):
        stream = Stream((entries("a"), entries("b")))
        with pytest.raises(ConnectionError):
            run(stream)
        assert not [c for c in stream.commands if c[0] in ("XACK", "XDEL")]


def test_an_existing_group_is_no_error_and_any_other_answer_is(stored):
    assert drain(Stream(busy="BUSYGROUP Consumer Group name already exists")) == 0
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        drain(Stream(busy="WRONGTYPE Operation against a key holding the wrong kind of value"))


def test_the_flusher_stores_the_records_it_journaled_as_they_are_and_forgets_stale_ones(stored):
    now = [100.0]
    first_flush = (entries("a", "b", "c"), [])
    second_flush = ([], entries("x"))  # claimed from a reader taken for dead
    stream = Stream(first_flush, second_flush)
    usage_writer = UsageWriter(Shared(stream), clock=lambda: now[0])
    stale, mine_a, mine_c = (
        UsageRecord.from_dict(journal_row(group_id=1, account_id=1)) for _ in range(3)
    )
    usage_writer.journaled(b"x-0", stale)  # another replica's flusher read it: never back here
    now[0] = 105.0
    usage_writer.journaled(b"a-0", mine_a)
    usage_writer.journaled(b"c-0", mine_c)
    now[0] = 100.0 + UsageWriter.KEEP_JOURNALED_S + 0.5

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "claim_idle_ms", lambda: 15000)
        patch.setattr(writer.bus, "REPLICA_ID", "replica-1")
        asyncio.run(usage_writer.flush())
        asyncio.run(usage_writer.flush())

    # Its own records go to the database as they are, not decoded again; another replica's
    # entry as its JSON; and a record kept past KEEP_JOURNALED_S was let go (its entry, read
    # back later, is decoded like any other).
    assert stored[0][0] is mine_a and stored[0][2] is mine_c and stored[0][1] == b"b"
    assert stored[1] == [b"x"]


def test_the_flusher_keeps_at_most_its_cap_of_records_dropping_the_oldest(stored):
    stream = Stream((entries("a", "b", "c"), []))
    usage_writer = UsageWriter(Shared(stream))
    usage_writer.KEEP_JOURNALED_MAX = 2
    mine = {name: UsageRecord.from_dict(journal_row(group_id=1, account_id=1)) for name in "abc"}
    for name, record in mine.items():  # a slow database: nothing read back meanwhile
        usage_writer.journaled(f"{name}-0".encode(), record)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "claim_idle_ms", lambda: 15000)
        patch.setattr(writer.bus, "REPLICA_ID", "replica-1")
        asyncio.run(usage_writer.flush())

    assert stored == [[b"a", mine["b"], mine["c"]]]  # the oldest was let go, then decoded
