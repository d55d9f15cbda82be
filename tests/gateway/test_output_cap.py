"""The vendor is always told the output cap the request's hold assumed, so a commit never
exceeds its hold; and where a vendor still bills past it, settlement collects the excess
after the hold (tests/billing/test_collected.py: and what the wallet cannot cover)."""

from __future__ import annotations

import httpx
from django.utils import timezone

from accounts.models import Group
from billing.ledger.wallet import reserve
from billing.models import Reservation, Wallet
from core.sqlexec import run_sync
from tests.support.processes import INTERNAL_TOKEN
from tests.support.profiles import stub_profiles
from tests.support.stacks import own_stack
from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store, usage_rows

HELLO = [{"role": "user", "content": "hello there"}]


def reasoning_profiles(stub_url: str) -> list[dict]:
    spec = stub_profiles(stub_url)
    spec[0]["models"].append(
        {
            "name": "o3-mini",
            "input_micro_per_mtok": 1_100_000,
            "output_micro_per_mtok": 4_400_000,
            "max_output_tokens": 300,
        }
    )
    return spec


def planned_cap(stack, tenant, model: str, **extra) -> tuple[int, int]:
    """Return (the output cap, the escrow) the plan holds for the request."""
    plan = httpx.post(
        f"{stack.url}/internal/decide",
        json={"group": tenant.group_id, "request_id": "cap", "model": model, "messages": HELLO}
        | extra,
        headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"},
    ).json()
    [link] = plan["links"]
    return link["max_tokens"], link["attempts"][0]["escrow_budget_micro"]


def test_every_adapter_tells_the_vendor_the_cap_the_hold_assumed(
    transactional_db, shared_gateway, stub
):
    stack = own_stack(shared_gateway, stub, reasoning_profiles(stub.url))
    tenant = stack.tenant()
    client = stack.openai(tenant)

    client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)  # no cap asked
    client.chat.completions.create(model="o3-mini", messages=HELLO, max_completion_tokens=120)
    client.chat.completions.create(model="o3-mini", messages=HELLO)
    stack.anthropic(tenant).messages.create(model="claude-3-5-haiku", max_tokens=50, messages=HELLO)
    client.chat.completions.create(model="router-mini", messages=HELLO)

    caps = [
        planned_cap(stack, tenant, "gpt-4o-mini")[0],
        planned_cap(stack, tenant, "o3-mini", max_tokens=120)[0],
        planned_cap(stack, tenant, "o3-mini")[0],
        50,
        planned_cap(stack, tenant, "router-mini")[0],
    ]
    assert caps == [4096, 120, 300, 50, 4096]
    assert [(c["model"], c["max_tokens"]) for c in stack.stub.vendor_calls()] == [
        ("gpt-4o-mini", 4096),
        ("o3-mini", 120),  # sent as max_completion_tokens (tests/unit/gateway/test_shapes.py)
        ("o3-mini", 300),
        ("claude-3-5-haiku-latest", 50),
        ("openai/gpt-4o-mini", 4096),
    ]
    # The reservation each prepaid request took is the worst case at exactly that cap.
    held = sorted(
        Reservation.objects.filter(wallet__account_id=tenant.account_id).values_list(
            "amount_micro", flat=True
        )
    )
    assert held == sorted(
        [
            planned_cap(stack, tenant, "gpt-4o-mini")[1],
            planned_cap(stack, tenant, "o3-mini", max_tokens=120)[1],
            planned_cap(stack, tenant, "o3-mini")[1],
            planned_cap(stack, tenant, "claude-3-5-haiku", max_tokens=50)[1],
            planned_cap(stack, tenant, "router-mini")[1],
        ]
    )
    rows = usage_rows(group_id=tenant.group_id, expect=5)
    assert all(r.status == 200 for r in rows)


def test_settlement_of_a_row_costing_more_than_its_hold_debits_the_hold_then_the_excess(
    transactional_db,
):
    tenant = make_tenant(wallet_micro=1_000)
    now = timezone.now()
    reservation_id = run_sync(
        reserve(
            account_id=tenant.account_id,
            request_id="over-hold",
            group_id=tenant.group_id,
            api_key_id=tenant.api_key_id,
            attempt_no=1,
            amount_micro=40,
            now=now,
            ttl_s=60,
        )
    )
    row = journal_row(
        group_id=tenant.group_id,
        account_id=tenant.account_id,
        api_key_id=tenant.api_key_id,
        request_id="over-hold",
        reservation_id=reservation_id,
        tokens_in=10,
        tokens_out=90,
        provider_cost_micro=55,
        attempts=[
            {
                "order": 1,
                "provider": "stub-openai",
                "model": "gpt-4o-mini",
                "served_by": "platform",
                "source": "stub-openai:gpt-4o-mini:platform",
                "outcome": "ok",
                "upstream_status": 200,
                "latency_ms": 5,
                "reservation_id": reservation_id,
            }
        ],
    )

    store(row)

    reservation = Reservation.objects.get(pk=reservation_id)
    assert (
        reservation.status,
        reservation.committed_micro,
        reservation.excess_micro,
        reservation.collected_micro,
    ) == ("committed", 40, 15, 15)
    wallet = Wallet.objects.get(account_id=tenant.account_id)
    assert (wallet.balance_micro, wallet.reserved_micro) == (945, 0)  # the excess collected
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro) == (55, 55)  # what the wallet paid
