from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from tests.support.alert_receivers import SmtpReceiver, WebhookReceiver


def allowing_loopback():
    """The test receivers listen on 127.0.0.1: allowed as the suite's web fetcher allows it
    (TOLLGATE_WEB_ALLOW_NETS), never in production's default."""
    return override_settings(TOLLGATE={**settings.TOLLGATE, "WEB_ALLOW_NETS": ["127.0.0.1/32"]})


@pytest.fixture
def receiver():
    servers: list[WebhookReceiver] = []
    allowing = allowing_loopback()
    allowing.enable()

    def start(*statuses: int) -> WebhookReceiver:
        servers.append(WebhookReceiver(list(statuses)))
        return servers[-1]

    yield start
    allowing.disable()
    for server in servers:
        server.close()


@pytest.fixture
def smtp():
    server = SmtpReceiver()
    yield server
    server.close()
