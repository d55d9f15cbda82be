"""Fixtures of the webfetch tests: crawl tenants made in the test database, and the test
site on 127.0.0.1 with a second one on 127.0.0.2."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from tests.support.testsite import TestSite

if TYPE_CHECKING:  # the models load once Django is set up (make_crawl_tenant)
    from accounts.models import Account, ApiKey, Group


@dataclass
class CrawlTenant:
    account: Account
    group: Group
    api_key: ApiKey


def make_crawl_tenant() -> CrawlTenant:
    from accounts.models import Account, ApiKey, Group

    tag = uuid.uuid4().hex[:10]
    account = Account.objects.create(name=f"crawl-{tag}")
    group = Group.objects.create(account=account, name="default")
    api_key = ApiKey.objects.create(group=group, prefix=tag[:8], key_hash=uuid.uuid4().hex * 2)
    return CrawlTenant(account=account, group=group, api_key=api_key)


@pytest.fixture
def tenant(db) -> CrawlTenant:
    return make_crawl_tenant()


@pytest.fixture
def new_job(tenant):
    """Create a job of the tenant: `new_job(seed_url=..., max_pages=..., ...)`."""
    from webfetch.jobs import create_job

    def create(**fields):
        fields.setdefault("seed_url", "http://site.test/")
        fields.setdefault("max_pages", 50)
        fields.setdefault("max_depth", 3)
        return create_job(
            account=tenant.account, group=tenant.group, api_key=tenant.api_key, **fields
        )

    return create


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
