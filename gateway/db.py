"""Run synchronous ORM work from the event loop, in the right thread.

PostgreSQL takes concurrent writers, so ORM calls run in a thread pool. SQLite (embedded
runs) locks the whole file per writer: its calls share one thread, so a process never
races itself into "database is locked".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

P = ParamSpec("P")
R = TypeVar("R")


def _serial() -> bool:
    return connections["default"].vendor == "sqlite"


def off_loop(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Return an awaitable version of a sync ORM function."""
    return sync_to_async(fn, thread_sensitive=_serial())
