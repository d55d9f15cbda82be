"""The login forms of the dashboard and the admin, throttled (accounts/throttle.py)."""

from __future__ import annotations

import threading

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from accounts import throttle, throttle_subjects
from core.config import tollgate

# Under ASGI each sign-in runs in a thread of its own and PBKDF2 releases the GIL: 60
# concurrent sign-ins are 60 threads hashing at once, which starve every other process on the
# host's cores (the gateway's included; bench/LOGIN_FLOOD.md). At most LOGIN_CONCURRENCY
# password checks run at once per process; the rest wait their turn.
_password_checks = threading.BoundedSemaphore(tollgate().login_concurrency)


class ThrottledSignIn:
    """Refuse a locked name or address before `authenticate` hashes anything; count failures.

    After `is_valid()`, `throttled_s` > 0 says the form was refused for a lockout that long
    (the view answers 429 with Retry-After).
    """

    throttled_s = 0

    def clean(self):
        name = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if name is None or not password:
            return super().clean()  # a field error already; nothing is checked
        meta = self.request.META if self.request is not None else {}
        attempt = self.begin_attempt(name, throttle_subjects.client_address(meta))
        if attempt.wait_s:
            self._refuse(attempt)
        try:
            with _password_checks:
                cleaned = super().clean()
        except ValidationError:
            wait_s = throttle.default.failed(attempt)
            if wait_s:
                self._refuse(attempt, wait_s)
            raise
        except BaseException:
            throttle.default.released(attempt)  # a server error is not a wrong password
            raise
        throttle.default.succeeded(attempt)
        return cleaned

    def begin_attempt(self, name: str, address: str) -> throttle.Attempt:
        return throttle.default.begin_sign_in(name=name, address=address)

    def _refuse(self, attempt: throttle.Attempt, wait_s: int = 0):
        self.throttled_s = wait_s or attempt.wait_s
        raise ValidationError(
            throttle_subjects.sign_in_refusal(self.throttled_s, busy=attempt.busy and not wait_s),
            code="throttled",
        ) from None


class SignInForm(ThrottledSignIn, AuthenticationForm):
    """The dashboard's login form."""


def is_operator_name(name: str) -> bool:
    """Say whether `name` is an active staff user's, exactly as the admin's login reads it."""
    users = get_user_model()._default_manager
    return users.filter(
        **{get_user_model().USERNAME_FIELD: name}, is_staff=True, is_active=True
    ).exists()


class AdminSignInForm(ThrottledSignIn, AdminAuthenticationForm):
    """The Django admin's login form (staff only, as Django's).

    Its own address count, and none for an operator's name: tenants who share an address
    with an operator never lock the operator out (accounts/throttle.py).
    """

    def begin_attempt(self, name: str, address: str) -> throttle.Attempt:
        return throttle.default.begin_admin_sign_in(
            name=name, address=address, operator=is_operator_name(name)
        )
