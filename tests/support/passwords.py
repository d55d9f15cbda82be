"""The test process's password hasher: Django's PBKDF2 at a thousand rounds, not a million.

Why: at a million rounds each hash is about 0.25 s of this process's CPU, and the suite makes
and checks many (every user a test creates, every sign-in through Django's test client):
tests/accounts/test_login_throttle.py alone took 47.1 s with them, 41.3 s without.
The algorithm's name stays `pbkdf2_sha256` and each hash carries its own round count, so a
gateway process the test starts (production settings, a million rounds) still verifies these
hashes; it upgrades one to a million rounds on its first successful sign-in, as it would an
old hash. Nothing is asserted about hashing cost, and no product setting changes.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.test.utils import override_settings


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000


def hash_passwords_quickly() -> None:
    """Make the test process's hasher the quick one (Django clears its hasher cache on the
    setting's change signal)."""
    override_settings(
        PASSWORD_HASHERS=["tests.support.passwords.QuickPBKDF2PasswordHasher"]
    ).enable()
