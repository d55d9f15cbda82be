"""Fixtures of the fetcher tests: the test site on 127.0.0.1 and a second one on 127.0.0.2."""

from __future__ import annotations

import pytest

from tests.support.testsite import TestSite


@pytest.fixture(scope="module")
def module_site():
    with TestSite() as server:
        yield server


@pytest.fixture
def site(module_site):
    module_site.clear()
    return module_site


@pytest.fixture(scope="module")
def other_site():
    """A site on another loopback address, which only 127.0.0.1/32 allowed must never reach."""
    with TestSite(host="127.0.0.2") as server:
        yield server
