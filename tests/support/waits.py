"""Waiting for something a process does: poll until it holds, fail the test at a deadline."""

from __future__ import annotations

import time

import pytest


def wait_until(check, *, timeout_s: float = 15.0, interval_s: float = 0.05, what: str = ""):
    """Poll `check` until it returns a truthy value; fail the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or check}")
        time.sleep(interval_s)


def seconds_left_in_minute() -> float:
    return 60 - time.time() % 60


def fresh_rate_window(min_left_s: float = 12.0) -> None:
    """Wait (if needed) until the fixed one-minute rate window has min_left_s left."""
    wait_until(
        lambda: seconds_left_in_minute() >= min_left_s,
        timeout_s=min_left_s + 2,
        interval_s=0.1,
        what="a rate window with room for the test",
    )
