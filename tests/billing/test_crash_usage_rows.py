"""Requests charged after a crash are in the tenant's usage, with their state.

A real gateway answers one request (its row journaled, never stored: its writer waits ten
minutes) and is killed with SIGKILL in the middle of a second, streamed one. The reaper
(billing.reaper.expire_stale_holds, the beat task's body) charges both at their hold, with
`unmeasured` receipts, and gives each a usage row marked `unmeasured` (usage/crash_rows.py):
the usage API, its request detail, the CSV export and the dashboard's usage list and detail
all list them, amounts exact, and the totals (read from the rollups) equal what the group was
charged. Then the first request's journaled row is drained late: it trues its request up to
what it measured and takes the unmeasured row's place, marked `trueup`; the other stays
`unmeasured`. One row per request throughout.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import lxml.html
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import Group, Membership
from billing.models import Receipt, SettledRequest, Wallet
from billing.reaper import expire_stale_holds
from tests.billing.test_crash_safety import worst_case
from tests.billing.test_true_up import slow_writer  # noqa: F401  (a fixture)
from tests.support.services import requires_postgres, requires_redis
from tests.support.usage import streamed_body
from usage.models import UsageLog
from usage.rollups import reconcile_rollups
from usage.writer import drain_journal_sync

pytestmark = [requires_postgres, requires_redis, pytest.mark.timeout(120)]
WALLET = 1_000_000
TTL_S = 4
HELLO = [{"role": "user", "content": "hello there"}]  # the stub bills 2 tokens in, 8 out
# (test_true_up's slow_writer: a gateway whose writer would store its journal only after ten
# minutes, on a Redis of its own; holds that expire after TTL_S.)
COST = 6  # 2 x 0.15 + 8 x 0.60 = 5.1 micro-USD, rounded up


def api_rows(tenant) -> dict[str, dict]:
    """The usage API's rows by request id; each request's detail says the same measurement."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    rows = {r["request_id"]: r for r in client.get("/api/usage").json()["results"]}
    for request_id, row in rows.items():
        detail = client.get(f"/api/usage/requests/{request_id}")
        assert detail.status_code == 200
        assert detail.json()["measurement"] == row["measurement"]
    return rows


def api_total_cost(tenant) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    # No range: whole days, read from the daily rollups alone.
    return sum(
        day["provider_cost_micro"] for day in client.get("/api/usage/daily").json()["results"]
    )


def csv_rows(tenant) -> dict[str, dict]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    text = streamed_body(client.get("/api/usage/export.csv")).decode()
    # Columns are only ever added at the end, so earlier ones stay where they were.
    assert text.splitlines()[0].endswith(",measurement,tags,guardrails")
    return {r["request_id"]: r for r in csv.DictReader(io.StringIO(text))}


def dashboard_badges(tenant, request_ids) -> dict[str, list[str]]:
    """Each request's measurement badge on the dashboard's usage list and its detail page."""
    client = Client()
    client.force_login(Membership.objects.get(account_id=tenant.account_id, role="owner").user)
    listed = lxml.html.fromstring(
        client.get(reverse("dashboard:usage", args=[tenant.account_id])).content
    )
    badges = {}
    for rid in request_ids:
        detail = lxml.html.fromstring(
            client.get(reverse("dashboard:usage-detail", args=[tenant.account_id, rid])).content
        )
        badges[rid] = [
            *listed.xpath(
                f'//tr[@data-request="{rid}"]//span[contains(@class, "measurement")]/text()'
            ),
            *detail.xpath('//dd[@id="status"]/span[contains(@class, "measurement")]/text()'),
        ]
    return badges


def test_crash_charged_requests_are_listed_unmeasured_then_trued_up(slow_writer, own_redis):  # noqa: F811
    doomed = slow_writer
    tenant = doomed.tenant(wallet_micro=WALLET, budget_micro=WALLET)
    hold, reserved = worst_case(doomed, tenant)  # for max_tokens=100
    client = doomed.openai(tenant)
    answered = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=HELLO, max_tokens=100
    )
    assert answered.parse().usage.completion_tokens == 8
    measured = answered.headers["x-tollgate-request-id"]

    doomed.kill_mid_stream(client, model="gpt-4o-mini", messages=HELLO, max_tokens=100)
    assert not UsageLog.objects.filter(group_id=tenant.group_id).exists()

    # The reaper, its clock past the holds' expiry: both served, neither stored: at the hold.
    assert expire_stale_holds(now=timezone.now() + timedelta(seconds=2 * TTL_S)) == (2, 2)
    markers = dict(
        SettledRequest.objects.filter(group_id=tenant.group_id).values_list("request_id", "source")
    )
    assert measured in markers and set(markers.values()) == {"reaper"}
    [cut] = set(markers) - {measured}
    assert sorted(
        Receipt.objects.filter(account_id=tenant.account_id).values_list(
            "request_id", "kind", "cost_micro"
        )
    ) == sorted([(measured, "unmeasured", hold), (cut, "unmeasured", hold)])

    rows = api_rows(tenant)
    assert {
        rid: (r["measurement"], r["provider_cost_micro"], r["tokens_in"], r["tokens_out"])
        for rid, r in rows.items()
    } == {
        measured: ("unmeasured", hold, 0, 0),
        cut: ("unmeasured", hold, 0, 0),
    }
    assert {
        rid: (r["measurement"], r["provider_cost_micro"]) for rid, r in csv_rows(tenant).items()
    } == {
        measured: ("unmeasured", str(hold)),
        cut: ("unmeasured", str(hold)),
    }
    assert dashboard_badges(tenant, [measured, cut]) == {
        measured: ["unmeasured", "unmeasured"],
        cut: ["unmeasured", "unmeasured"],
    }
    group = Group.objects.get(pk=tenant.group_id)
    assert group.settled_micro == 2 * hold == api_total_cost(tenant)

    # The first request's row arrives late: trued up to what it measured, in its row's place.
    assert drain_journal_sync(own_redis.url, idle_ms=0) == 1
    rows = api_rows(tenant)
    assert {
        rid: (r["measurement"], r["provider_cost_micro"], r["tokens_in"], r["tokens_out"])
        for rid, r in rows.items()
    } == {
        measured: ("trueup", COST, 2, 8),
        cut: ("unmeasured", hold, 0, 0),
    }
    assert {
        rid: (r["measurement"], r["provider_cost_micro"]) for rid, r in csv_rows(tenant).items()
    } == {
        measured: ("trueup", str(COST)),
        cut: ("unmeasured", str(hold)),
    }
    assert dashboard_badges(tenant, [measured, cut]) == {
        measured: ["trueup", "trueup"],
        cut: ["unmeasured", "unmeasured"],
    }
    assert UsageLog.objects.filter(group_id=tenant.group_id).count() == 2
    group = Group.objects.get(pk=tenant.group_id)
    assert group.settled_micro == hold + COST == api_total_cost(tenant)
    assert SettledRequest.objects.get(request_id=measured).source == "trueup"
    assert Receipt.objects.filter(request_id=measured, kind="trueup").exists()
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    # The cut stream's reservation committed at its amount, the other's trued to its cost.
    assert (wallet.balance_micro, wallet.reserved_micro) == (WALLET - COST - reserved, 0)
    # The rollups equal the rows after the swap: their audit rebuilds no day.
    assert reconcile_rollups(now=timezone.now() + timedelta(days=2)) == []
