"""/metrics of a multi-worker gateway: every scrape, whichever worker answers, sums them all.

Each test starts its own `uvicorn --workers 2` gateway (a fresh server run starts from zero),
with the profiles and tenants in place before it starts so both workers load them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import Gateway, start_gateway
from tests.support.profiles import install_profiles
from tests.support.tenants import make_tenant
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

METRICS_TOKEN = "metrics-token-for-tests-0123456789abcdef"
PROMPT = "count these five words"  # the stub: 4 prompt tokens, 8 answer tokens
USAGE_COUNTERS = {
    "tollgate_tokens_in_total": ("tokens_in", "byok_tokens_in"),
    "tollgate_tokens_out_total": ("tokens_out", "byok_tokens_out"),
    "tollgate_provider_cost_micro_total": ("provider_cost_micro",),
    "tollgate_bytes_in_total": ("bytes_in",),
    "tollgate_bytes_out_total": ("bytes_out",),
}


def start_fleet(tmp_dir: Path, *, workers: int = 2, **env: str) -> Gateway:
    """Start a real gateway as `uvicorn --workers N` and wait until every worker runs."""
    gateway = start_gateway(
        tmp_dir,
        workers=workers,
        TOLLGATE_METRICS_TOKEN=METRICS_TOKEN,
        TOLLGATE_BREAKER_FAILURES="1000000",
        **env,
    )
    wait_until(
        lambda: len(worker_pids(gateway)) == workers and healthy(gateway),
        timeout_s=60,
        what="every gateway worker",
    )
    return gateway


def healthy(gateway: Gateway) -> bool:
    try:
        return httpx.get(f"{gateway.url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def worker_pids(gateway: Gateway) -> list[int]:
    """Return the pids of the server's worker processes (uvicorn spawns them)."""
    pid = gateway.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [
        int(child)
        for child in children
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


def workers_that_served(gateway: Gateway) -> set[str]:
    """Return the pids with a counters file: the workers that finished a request."""
    fleets = list((Path(gateway.env["TOLLGATE_VAR_DIR"]) / "metrics").glob("*/counter_*.db"))
    return {path.stem.removeprefix("counter_") for path in fleets}


def scrape(gateway: Gateway) -> dict[tuple[str, tuple], float]:
    """Scrape /metrics over a new connection: {(sample name, sorted label items): value}."""
    response = httpx.get(
        f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def usage_series(samples: dict) -> dict[tuple, float]:
    """Return the usage counters' non-zero samples by (name, model, group, served_by)."""
    series = {}
    for (name, labels), value in samples.items():
        if name in USAGE_COUNTERS and value:
            by = dict(labels)
            series[(name, by["model"], by["group"], by["served_by"])] = value
    return series


def expected_series(rows) -> dict[tuple, float]:
    """Sum the stored usage rows the way the counters must: by (model, group, served_by)."""
    totals: Counter = Counter()
    for row in rows:
        labels = (row.model_served or "none", str(row.group_id), row.served_by or "none")
        for name, fields in USAGE_COUNTERS.items():
            amount = sum(getattr(row, field) for field in fields)
            if amount:
                totals[(name, *labels)] += amount
    return dict(totals)


def requests_count(samples: dict, route: str, status: str, code: str) -> float:
    labels = (("code", code), ("route", route), ("status", status))
    return samples.get(("tollgate_requests_total", labels), 0.0)


async def send_all(url: str, calls: list[tuple[str, dict, dict]]) -> list[httpx.Response]:
    """Send the calls concurrently, each on its own connection, so both workers take some."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=15, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(f"{url}{path}", headers=headers, json=body)
                for path, headers, body in calls
            )
        )


def chat(api_key: str, model: str, *, stream: bool = False) -> tuple[str, dict, dict]:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": PROMPT}]}
    return "/v1/chat/completions", {"Authorization": f"Bearer {api_key}"}, body


def message(api_key: str, model: str) -> tuple[str, dict, dict]:
    body = {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": PROMPT}]}
    return "/v1/messages", {"x-api-key": api_key}, body


@pytest.fixture
def fleet(transactional_db, stub, tmp_path_factory):
    """Start 2-worker gateways for one test (after its setup); stop them when it ends."""
    stub.clear()
    started: list[Gateway] = []

    def start(**env: str) -> Gateway:
        gateway = start_fleet(tmp_path_factory.mktemp("fleet"), **env)  # type: ignore[arg-type]  # variables
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


def team_tenant(provider: str):
    from accounts.models import Group
    from byok.services import team_key_add

    tenant = make_tenant()
    group = Group.objects.get(pk=tenant.group_id)
    team_key_add(group=group, provider=provider, label="team-a", key="sk-team-a")
    return tenant


def test_every_scrape_sums_the_usage_of_both_workers(fleet, stub):
    install_profiles(stub.url)
    platform, team = make_tenant(), team_tenant("stub-openai")
    gateway = fleet()
    round_ = [
        chat(platform.api_key, "gpt-4o-mini"),
        chat(platform.api_key, "gpt-4o-mini", stream=True),
        chat(platform.api_key, "gpt-4o"),
        message(platform.api_key, "claude-3-5-haiku"),
        chat(team.api_key, "gpt-4o-mini"),  # served with the team key: tokens, no cost
        chat(team.api_key, "gpt-4o-mini", stream=True),
    ]
    sent: list[httpx.Response] = []
    # Rounds until both workers finished some (the kernel picks who accepts a connection).
    for _ in range(10):
        sent += asyncio.run(send_all(gateway.url, round_ * 4))
        if len(workers_that_served(gateway)) == 2:
            break
    assert len(workers_that_served(gateway)) == 2
    assert {r.status_code for r in sent} == {200}, [r.text for r in sent if r.status_code != 200]
    rows = [
        *usage_rows(group_id=platform.group_id, expect=len(sent) * 4 // 6),
        *usage_rows(group_id=team.group_id, expect=len(sent) * 2 // 6),
    ]
    assert len(rows) == len(sent)
    expected = expected_series(rows)
    assert {key[2:] for key in expected} == {
        (str(platform.group_id), "platform"),
        (str(team.group_id), "team"),
    }
    team_cost = ("tollgate_provider_cost_micro_total", "gpt-4o-mini", str(team.group_id), "team")
    assert team_cost not in expected  # team-served tokens cost the platform nothing

    chats = sum(1 for r in sent if r.request.url.path == "/v1/chat/completions")
    for _ in range(8):  # new connections: the scrapes land on both workers
        samples = scrape(gateway)
        assert usage_series(samples) == expected
        assert requests_count(samples, "chat", "200", "ok") == chats
        assert requests_count(samples, "messages", "200", "ok") == len(sent) - chats
        assert samples[("tollgate_in_flight", ())] == 0


def test_a_model_not_served_is_labelled_none_and_the_token_guards_the_scrape(fleet, stub):
    install_profiles(stub.url)
    tenant = make_tenant()
    gateway = fleet()
    asked = "no-such-model-9d2c"

    (response,) = asyncio.run(send_all(gateway.url, [chat(tenant.api_key, asked)]))

    assert response.status_code in (400, 403, 404)
    samples = scrape(gateway)
    (row,) = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.model_requested, row.model_served) == (asked, "")
    labels = ("none", str(tenant.group_id), "none")
    assert usage_series(samples) == {
        ("tollgate_bytes_in_total", *labels): row.bytes_in,
        ("tollgate_bytes_out_total", *labels): row.bytes_out,
    }
    text = httpx.get(
        f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    ).text
    assert asked not in text

    # The token guards the scrape (on this fleet too: a fleet's start costs more than this).
    url = f"{gateway.url}/metrics"
    missing = httpx.get(url)
    wrong = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN[:-1]}x"})
    odd = httpx.get(url, headers={"Authorization": "Bearer caf\xe9".encode("latin-1")})
    right = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})

    for refused in (missing, wrong, odd):
        assert (refused.status_code, refused.json()["error"]["code"]) == (401, "LM-1001")
    assert right.status_code == 200
    assert "tollgate_in_flight" in right.text


def test_killed_workers_keep_their_counts_and_drop_their_in_flight(fleet, stub):
    install_profiles(stub.url)
    tenant = make_tenant()
    gateway = fleet()
    done = asyncio.run(send_all(gateway.url, [chat(tenant.api_key, "gpt-4o-mini")] * 6))
    assert {r.status_code for r in done} == {200}
    before = usage_series(scrape(gateway))
    assert (
        before[("tollgate_tokens_out_total", "gpt-4o-mini", str(tenant.group_id), "platform")] == 48
    )

    stub.faults({"kind": "slow", "delay_ms": 1000})  # 8 tokens: 8 s in flight

    def hang() -> None:
        try:
            asyncio.run(send_all(gateway.url, [chat(tenant.api_key, "gpt-4o-mini", stream=True)]))
        except httpx.HTTPError:
            pass  # its worker is killed mid-answer

    hung = threading.Thread(target=hang, daemon=True)
    hung.start()
    wait_until(
        lambda: scrape(gateway)[("tollgate_in_flight", ())] == 1,
        timeout_s=5,
        what="the request to be in flight",
    )
    old = worker_pids(gateway)
    for pid in old:
        os.kill(pid, signal.SIGKILL)  # no shutdown: their gauge files stay behind
    hung.join(10)
    wait_until(
        lambda: len(set(worker_pids(gateway)) - set(old)) == 2 and healthy(gateway),
        timeout_s=60,
        what="uvicorn to restart both workers",
    )

    samples = scrape(gateway)
    assert samples[("tollgate_in_flight", ())] == 0
    assert usage_series(samples) == before
    assert requests_count(samples, "chat", "200", "ok") == 6
