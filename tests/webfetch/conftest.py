"""Fixtures of the crawl tests: a tenant (account, group, key) made in the test database."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest


@dataclass
class CrawlTenant:
    account: object
    group: object
    api_key: object


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
