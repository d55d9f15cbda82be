"""Web acquisition in tests: profiles on the stub (renderer, search) and our own fetcher, a
gateway allowed to fetch the test site on 127.0.0.1, and real Celery workers for crawls."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from tests.support.processes import Worker, start_worker

PAGE_MICRO = 100
RENDERED_MICRO = 2_000
QUERY_MICRO = 5_000
RENDER_KEY = "sk-render-platform-7a1c"
SEARCH_KEY = "sk-search-platform-3e9d"
# What a web gateway of the tests runs with: the test site is on 127.0.0.1 (allowed by the
# setting that is off in production), and crawls wait little between two pages of a host.
WEB_ENV = {
    "TOLLGATE_WEB_ALLOW_NETS": "127.0.0.1/32",
    "TOLLGATE_CRAWL_HOST_DELAY_MS": "0",
}


def web_profiles(
    stub_url: str,
    *,
    direct: bool = True,
    render: bool = True,
    search: bool = True,
    timeout_s: int = 5,
) -> list[dict]:
    spec = []
    if direct:
        spec.append(
            {
                "name": "direct",
                "kind": "direct_http",
                "timeout_s": timeout_s,
                "units": {"page": PAGE_MICRO},
            }
        )
    if render:
        spec.append(
            {
                "name": "stub-render",
                "kind": "render_api",
                "base_url": f"{stub_url}/web/v1",
                "timeout_s": timeout_s,
                "units": {"rendered_page": RENDERED_MICRO},
            }
        )
    if search:
        spec.append(
            {
                "name": "stub-search",
                "kind": "search_api",
                "base_url": f"{stub_url}/web/v1",
                "timeout_s": timeout_s,
                "units": {"query": QUERY_MICRO},
            }
        )
    return spec


def install_web_profiles(spec: list[dict]) -> None:
    """Install the web profiles, each vendor with its own platform key (faults match keys)."""
    from django.db import transaction

    from providers.services import profile_set_platform_key
    from providers.spec import profiles_bootstrap

    keys = {"render_api": RENDER_KEY, "search_api": SEARCH_KEY}
    with transaction.atomic():
        for profile in profiles_bootstrap(spec=spec):
            if profile.kind in keys:
                profile_set_platform_key(profile=profile, api_key=keys[profile.kind])
                profile.save()


def web_stack(gateway, stub, site, spec: list[dict]):
    """Prepare a web gateway for one test: a clean stub and site, these profiles, reloaded."""
    from tests.support.services import clear_shared_state
    from tests.support.stacks import Stack

    stub.clear()
    site.clear()
    clear_shared_state()
    install_web_profiles(spec)
    gateway.reload()
    return Stack(gateway=gateway, stub=stub)


def search_results(query: str, n: int) -> list[dict]:
    """The stub search vendor's results for a query (its documented rule)."""
    import re

    slug = re.sub(r"[^a-z0-9]+", "-", query.lower()).strip("-")
    return [
        {
            "url": f"https://search.example/{slug}/{i}",
            "title": f"{query} — result {i}",
            "snippet": f"Result {i} for {query}.",
        }
        for i in range(1, n + 1)
    ]


def web(
    url: str, key: str, path: str, body: dict, *, headers: dict | None = None, **kwargs
) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/web/{path}",
        json=body,
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
        timeout=60,
        **kwargs,
    )


def start_web_worker(tmp_dir: Path, name: str, **env: str) -> Worker:
    """A crawl worker: a real Celery worker that may fetch the test site."""
    return start_worker(
        tmp_dir,
        name,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        **{**WEB_ENV, **env},
    )


def loopback_names() -> list[str]:
    """Names this machine resolves to loopback only, other than `localhost` (which the
    request's shape refuses by name): its own host name, as /etc/hosts usually maps it."""
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
    except OSError:
        return []
    # str(): an AF_INET / AF_INET6 address (getaddrinfo types the other families' too).
    hosts = [str(info[4][0]) for info in infos]
    loopback = all(host.startswith("127.") or host == "::1" for host in hosts)
    return [name] if infos and loopback else []


def assert_refused_unbilled(
    tenant,
    *,
    wallet_micro: int,
    error: str,
    endpoint: str = "web.scrape",
    planned: bool = True,
) -> None:
    """One usage row, the refusal's (HTTP 400), billing nothing; the wallet and the group as
    before. `planned`: the request got as far as its plan (a prepaid one reserved on its
    wallet, committed at what its units cost: nothing)."""
    from accounts.models import Group
    from billing.models import Reservation, Wallet
    from tests.support.usage import settled

    [row] = settled(tenant, 1)
    assert (row.endpoint, row.status, row.error_code) == (endpoint, 400, error)
    assert (row.web_pages, row.web_rendered_pages, row.provider_cost_micro) == (0, 0, 0)
    assert row.bandwidth_charge_micro == 0
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (0, 0, 0)
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == wallet_micro
    held = Reservation.objects.filter(request_id=row.request_id)
    prepaid = group.account.billing_mode == "prepaid"
    assert list(held.values_list("status", "committed_micro")) == (
        [("committed", 0)] if prepaid and planned else []
    )
