"""A webhook try connects to the address its check approved: a name that answers an allowed
address to the check and the gateway's own host to a second lookup (DNS rebinding) never
reaches the second. Names are answered by a resolver the test installs for them alone."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from alerts.channels import post_webhook
from tests.support.alert_receivers import WebhookReceiver
from tests.support.fakedns import scripted_names

SECRET = "whsec_pinning"


@pytest.fixture
def names(monkeypatch):
    """name -> the addresses its successive lookups answer (the last one repeats)."""
    return scripted_names(monkeypatch)


@pytest.fixture
def hook():
    receiver = WebhookReceiver(secret=SECRET)
    yield receiver
    receiver.close()


def allowing(*nets: str):
    return override_settings(TOLLGATE={**settings.TOLLGATE, "WEB_ALLOW_NETS": list(nets)})


def port_of(receiver: WebhookReceiver) -> int:
    return receiver.server.server_address[1]


def test_a_name_rebound_to_a_refused_address_after_the_check_is_not_reached(names, hook):
    answers, asked = names
    # Allowed: 127.0.0.2 (nothing listens there). Refused: 127.0.0.1, where the hook listens.
    answers["rebind.example"] = ["127.0.0.2", "127.0.0.1"]
    url = f"http://rebind.example:{port_of(hook)}/hooks/tollgate"

    with allowing("127.0.0.2/32"):
        outcome = post_webhook(url=url, secret=SECRET, event_id="evt_1", payload={"a": 1})

    assert (outcome.ok, outcome.error) == (False, "ConnectError posting to the webhook")
    assert hook.received == []
    assert asked == ["rebind.example"]  # looked up once: by the check


def test_a_pinned_try_keeps_the_name_in_its_host_header_and_is_delivered(names, hook):
    answers, asked = names
    answers["hooks.example"] = ["127.0.0.1"]
    url = f"http://hooks.example:{port_of(hook)}/hooks/tollgate"

    with allowing("127.0.0.1/32"):
        outcome = post_webhook(url=url, secret=SECRET, event_id="evt_2", payload={"a": 2})

    assert (outcome.ok, outcome.status_code) == (True, 200)
    [received] = hook.received
    assert (received.event_id, received.body, received.signed) == ("evt_2", b'{"a":2}', True)
    assert received.host == f"hooks.example:{port_of(hook)}"
    assert asked == ["hooks.example"]
