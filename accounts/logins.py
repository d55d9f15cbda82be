"""Dashboard logins: one-time links that let an account member set their password.

A link carries the user's id and a token from Django's password-reset generator. The token
is a keyed hash over the user's password hash and last login, so it stops working once the
password is set (or the user logs in), and after PASSWORD_RESET_TIMEOUT.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.contrib.auth.tokens import default_token_generator
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode


def password_link_issue(*, user: User) -> str:
    """Return the path of a one-time link at which `user` sets a dashboard password."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return reverse("dashboard:set-password", kwargs={"uidb64": uid, "token": token})


def password_link_url(*, user: User, base_url: str) -> str:
    """Return the full URL of a one-time set-password link on the control plane at `base_url`."""
    return base_url.rstrip("/") + password_link_issue(user=user)
