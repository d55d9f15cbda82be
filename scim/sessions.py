"""End a person's dashboard sessions on every replica.

Sessions live in the database (django.contrib.sessions.backends.db) and each request loads
its session row and the user afresh, so a deleted row is a signed-out browser everywhere at
once; no process caches either. The database backend stores sessions encoded, keyed only by
their key, so every sign-in records its key here (the user_logged_in signal, connected in
ScimConfig.ready, fires for the dashboard's, the admin's and the SSO sign-ins alike).
"""

from __future__ import annotations

from typing import Any

from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models import Exists, OuterRef

from scim.models import SignedInSession


def remember_session(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """Record the key of the session `user` just signed in with (login() cycled it)."""
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    if key is None or user is None or user.pk is None:
        return
    SignedInSession.objects.update_or_create(session_key=key, defaults={"user": user})
    # Forget this user's keys whose sessions expired or were cleared meanwhile.
    live = Session.objects.filter(session_key=OuterRef("session_key"))
    SignedInSession.objects.filter(user=user).exclude(Exists(live)).delete()


def forget_session(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """Drop the record of a session its user signed out of."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key is not None:
        SignedInSession.objects.filter(session_key=key).delete()


@transaction.atomic
def sessions_end(*, user: Any) -> int:
    """Delete every recorded session of `user`; return how many sessions there were."""
    keys = list(SignedInSession.objects.filter(user=user).values_list("session_key", flat=True))
    ended, _ = Session.objects.filter(session_key__in=keys).delete()
    SignedInSession.objects.filter(user=user).delete()
    return ended
