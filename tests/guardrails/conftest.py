from __future__ import annotations

from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from core import bus


def client_for(tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


@pytest.fixture
def announced() -> Iterator[list[tuple[str, dict]]]:
    """What the bus receives (a write's announcements wait for its commit: run the test's
    writes inside django_capture_on_commit_callbacks(execute=True))."""
    heard: list[tuple[str, dict]] = []
    listeners = {
        topic: (lambda payload, topic=topic: heard.append((topic, payload)))
        for topic in (bus.Topic.GROUP, bus.Topic.API_KEY)
    }
    for topic, listener in listeners.items():
        bus.subscribe(topic, listener)
    yield heard
    for topic, listener in listeners.items():
        bus._subscribers[topic].remove(listener)
