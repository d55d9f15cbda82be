"""`manage.py wait_ready`: what compose.yaml runs before each Tollgate process (podman-compose
ignores health conditions on podman < 4.6, so each process waits itself)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.support.processes import free_port
from tests.support.services import requires_postgres, requires_redis

pytestmark = [pytest.mark.django_db, requires_postgres, requires_redis]


def test_a_migrated_granted_database_and_an_answering_redis_are_ready_at_once():
    out, err = io.StringIO(), io.StringIO()
    call_command("wait_ready", "--timeout", "5", stdout=out, stderr=err)
    # At once: the first check passed, so no "waiting:" line was written and no second check
    # made. Not "0 s": the seconds are the first check's own time, rounded, and on a loaded
    # host (a CI run) that one check took over half a second.
    assert err.getvalue() == ""
    assert re.fullmatch(r"ready after [01] s\n", out.getvalue()), out.getvalue()


def test_a_redis_that_never_answers_is_named_once_then_given_up_on(settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    err = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("wait_ready", "--timeout", "2", stderr=err)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("waiting: Redis: Error 111 connecting")
    assert str(refused.value).startswith("not ready after 2 s: Redis: Error 111 connecting")
