"""Request ids the gateway mints: 32 hex characters, ordered by time.

The first 12 hex digits are the millisecond the request arrived (UUIDv7's order), the other
20 are random (80 bits: ids minted in the same millisecond never meet in practice). Ordered
ids land at the right edge of every unique index keyed by them (the usage log's, the
billing tables'), so each insert touches pages already in memory; random ids touch a random
page of an index that outgrows shared_buffers. bench/request_ids.py measures the difference.
The shape, `[0-9a-f]{32}`, is the uuid4 hex one minted before.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime

# The OS's randomness, read 4 KB at a time (410 ids): one read per id was a system call on
# every request, and one that lets go of the GIL, handing it to the usage writer's thread.
_READ = 4096
_ID_BYTES = 10


class _Randomness(threading.local):
    """Each thread's unread randomness: never shared, so never handed out twice."""

    data = b""
    at = 0


_randomness = _Randomness()


def _forget_randomness() -> None:
    """In a forked child: start on its own randomness, not on a copy of its parent's."""
    _randomness.__dict__.clear()  # the forking thread's, the only one a child has


os.register_at_fork(after_in_child=_forget_randomness)


def time_ordered_id(now_ns: int | None = None) -> str:
    """A new request id: the millisecond of `now_ns` (default: now), then 80 random bits."""
    millis = (time.time_ns() if now_ns is None else now_ns) // 1_000_000
    unread = _randomness
    at = unread.at
    if at + _ID_BYTES > len(unread.data):
        unread.data, at = os.urandom(_READ), 0
    unread.at = at + _ID_BYTES
    return f"{millis:012x}{unread.data[at : at + _ID_BYTES].hex()}"


def time_prefix(moment: datetime) -> str:
    """The 12 hex digits every id minted at `moment` starts with (naive: taken as UTC).

    Compared as strings (collation "C"), ids minted in [a, b) are exactly those from
    time_prefix(a) up to, not including, time_prefix(b): ranges of ids are ranges of time.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return f"{int(moment.timestamp() * 1000):012x}"
