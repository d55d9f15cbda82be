"""Run synchronous ORM work from the event loop, in the right thread; multi-row placeholders.

PostgreSQL takes concurrent writers, so ORM calls run in a thread pool. SQLite (embedded
runs) locks the whole file per writer: its calls share one thread, so a process never
races itself into "database is locked".
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

P = ParamSpec("P")
R = TypeVar("R")


def _serial() -> bool:
    return connections["default"].vendor == "sqlite"


def off_loop(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Return an awaitable version of a sync ORM function."""

    @functools.wraps(fn)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except DatabaseError:
            # Off Django's request cycle nobody re-checks a connection: drop a broken one now,
            # so the next call in this thread reconnects (e.g. after a database restart).
            for connection in connections.all(initialized_only=True):
                connection.close_if_unusable_or_obsolete()
            raise

    return sync_to_async(guarded, thread_sensitive=_serial())


def values_placeholders(count: int, width: int) -> str:
    """`(%s, ..), (%s, ..)`: `count` rows of `width` parameters, for a multi-row statement."""
    one = "(" + ", ".join(["%s"] * width) + ")"
    return ", ".join([one] * count)
