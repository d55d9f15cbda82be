"""Fixtures of the usage tests (their helpers are tests/support/usage.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def tenant_pair(transactional_db):
    from tests.support.tenants import make_tenant

    return make_tenant(), make_tenant()
