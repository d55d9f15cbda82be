"""A replica counts a bus message applied only once its subscribers' work has completed: the
acknowledgement a waiting publisher returns on means "live here", not "heard"."""

from __future__ import annotations

import asyncio

import pytest

from core import bus

TOPIC = "test-topic"


@pytest.fixture
def subscribers(monkeypatch):
    table = {}
    monkeypatch.setattr(bus, "_subscribers", table)
    return table


def test_a_message_is_applied_after_the_work_it_returned_completes(subscribers):
    done = []

    async def reload():
        await asyncio.sleep(0)
        done.append("reloaded")

    subscribers[TOPIC] = [lambda payload: done.append(payload["n"]), lambda _: reload()]

    assert asyncio.run(bus._apply(TOPIC, {"n": 1})) is True
    assert done == [1, "reloaded"]


def test_failed_or_stuck_work_is_not_counted_as_applied(subscribers, monkeypatch):
    monkeypatch.setattr(bus, "APPLY_TIMEOUT_S", 0.05)

    async def broken():
        raise RuntimeError("database unreachable")

    async def stuck():
        await asyncio.Event().wait()

    subscribers[TOPIC] = [lambda _: broken()]
    assert asyncio.run(bus._apply(TOPIC, {})) is False
    subscribers[TOPIC] = [lambda _: stuck()]
    assert asyncio.run(bus._apply(TOPIC, {})) is False


def test_a_subscriber_that_raises_does_not_stop_the_others(subscribers):
    seen = []

    def broken(_):
        raise ValueError("bad payload")

    subscribers[TOPIC] = [broken, seen.append]

    assert bus.deliver(TOPIC, {"n": 2}) == []
    assert seen == [{"n": 2}]
