"""Each sign-in records its session key against the user, so deprovisioning finds every
session; signing out forgets it, and a later sign-in forgets keys whose sessions are gone."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client

from scim.models import SignedInSession
from scim.sessions import sessions_end

pytestmark = pytest.mark.django_db
PASSWORD = "a long pass phrase for tests"


def test_sign_ins_are_recorded_forgotten_on_sign_out_and_all_ended_at_once():
    user = get_user_model().objects.create_user(username="ada", password=PASSWORD)
    browsers = [Client(), Client(), Client()]
    for browser in browsers:
        assert browser.login(username="ada", password=PASSWORD)
    keys = {b.session.session_key for b in browsers}
    assert set(SignedInSession.objects.values_list("session_key", flat=True)) == keys

    browsers[0].logout()
    assert SignedInSession.objects.filter(user=user).count() == 2
    Session.objects.filter(session_key=browsers[1].session.session_key).delete()  # expired
    late = Client()
    assert late.login(username="ada", password=PASSWORD)
    assert set(SignedInSession.objects.values_list("session_key", flat=True)) == {
        browsers[2].session.session_key,
        late.session.session_key,
    }

    assert sessions_end(user=user) == 2
    assert not Session.objects.filter(session_key__in=keys | {late.session.session_key}).exists()
    assert not SignedInSession.objects.exists()
