"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import pytest

from tests.support.testsite import TestSite


@pytest.fixture(scope="module")
def site():
    """The local test site (tests/support/testsite.py) the web tests fetch from."""
    with TestSite() as test_site:
        yield test_site
