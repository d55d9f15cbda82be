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
