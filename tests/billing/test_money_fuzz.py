"""Seeded fuzz of the money steps: random holds, reservations, commits, cancels, batch
settlements, reaps, reconciliations, top-ups and corrections, some racing in real concurrent
PostgreSQL transactions, with the books checked after every step.

Replay a failure with its seed: `MONEY_FUZZ_SEED=<seed> pytest tests/billing/test_money_fuzz.py`
(`MONEY_FUZZ_STEPS` sets the length). A seed fixes every operation and its arguments;
inside a concurrent burst the interleaving is the database's, so a refusal that depends on
who won a race can differ between runs of one seed.
"""

from __future__ import annotations

import os
import random
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from accounts.models import ApiKey, Group
from accounts.services import api_key_create
from billing.ledger.charges import Charge, charge
from billing.ledger.fused import (
    HOLD_AND_RESERVE_STATEMENT,
    HOLD_ONE_STATEMENT,
    RESERVE_ONE_STATEMENT,
    SENT_HOLD_ONE_STATEMENT,
)
from billing.ledger.holds import CallerBudget, Hold, mark_hold_sent, release_holds, take_hold
from billing.ledger.sql import Refused
from billing.ledger.wallet import cancel_reservation, commit_reservations, reserve
from billing.models import (
    CallerSpend,
    LedgerEntry,
    Reservation,
    SettledRequest,
    SpendHold,
    Wallet,
)
from billing.reaper import expire_stale_holds
from billing.reconcile import LoggedCharge, reconcile_window
from billing.services import wallet_credit
from billing.settlement import settle_rows
from core.sqlexec import run_sync
from core.usage_record import UsageRecord
from tests.support.services import requires_postgres
from tests.support.tenants import make_tenant

pytestmark = [requires_postgres, pytest.mark.timeout(120)]

SEEDS = [int(os.environ["MONEY_FUZZ_SEED"])] if os.environ.get("MONEY_FUZZ_SEED") else [1, 2, 3]
STEPS = int(os.environ.get("MONEY_FUZZ_STEPS", "110"))
BURST = 0.35  # share of steps that run several operations at once, from threads


@dataclass
class Owner:
    account_id: int
    wallet_id: int
    group_id: int
    key_ids: list[int]
    key_budgeted: dict[int, bool]
    callers: list[CallerBudget]
    group_budgeted: bool


@dataclass
class Request:
    request_id: str
    owner: Owner
    api_key_id: int
    reservations: list[int] = field(default_factory=list)


@dataclass
class World:
    rng: random.Random
    owners: list[Owner]
    now: datetime
    requests: list[Request] = field(default_factory=list)
    # (id, its request id, amount)
    reservations: list[tuple[int, str, int]] = field(default_factory=list)
    prefix: str = "fuzz"
    counter: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    resolved: dict[int, tuple] = field(default_factory=dict)  # reservation -> final state
    # reservation -> what the reaper committed unmeasured, before its late row trued it up
    released: dict[str, str] = field(default_factory=dict)  # request -> final hold status

    def request_id(self) -> str:
        self.counter += 1
        return f"{self.prefix}-{self.counter}"


def make_world(seed: int, *, prefix: str = "fuzz") -> World:
    rng = random.Random(seed)
    owners = []
    for index in range(3):
        budget = None if index == 0 else rng.randrange(20_000, 60_000)
        tenant = make_tenant(wallet_micro=rng.randrange(10_000, 40_000), budget_micro=budget)
        group = Group.objects.get(pk=tenant.group_id)
        second, _ = api_key_create(group=group, name="second")
        keys = [tenant.api_key_id, second.pk]
        budgeted = {tenant.api_key_id: False, second.pk: index != 0}
        if budgeted[second.pk]:
            ApiKey.objects.filter(pk=second.pk).update(
                budget_max_micro=rng.randrange(5_000, 20_000)
            )
        callers = (
            [CallerBudget(tenant.group_id, f"caller-{n}", "2026-12", 8_000) for n in range(2)]
            if budget
            else []
        )
        owners.append(
            Owner(
                account_id=tenant.account_id,
                wallet_id=Wallet.objects.get(account_id=tenant.account_id).pk,
                group_id=tenant.group_id,
                key_ids=keys,
                key_budgeted=budgeted,
                callers=callers,
                group_budgeted=budget is not None,
            )
        )
    return World(rng=rng, owners=owners, now=timezone.now(), prefix=prefix)


# ---------------------------------------------------------------- operations
#
# Each `plan_*` draws its arguments from the seeded generator (in the main thread) and returns
# (description, run, record): `run` touches only the database (it may run in a thread),
# `record` notes what it made in the world afterwards, in plan order.


def plan_hold(w: World):
    owner = w.rng.choice(w.owners)
    key_id = w.rng.choice(owner.key_ids)
    request = Request(w.request_id(), owner, key_id)
    amount = w.rng.choice([0, w.rng.randrange(1, 4_000), w.rng.randrange(1, 12_000)])
    caller = w.rng.choice([None, *owner.callers]) if owner.callers else None
    sent = w.rng.random() < 0.5
    ttl_s = w.rng.randrange(5, 60)
    now = w.now
    one_statement = not owner.group_budgeted and sent and w.rng.random() < 0.5
    # The request path's hold when only the group's budget bounds it.
    group_only = not owner.key_budgeted[key_id] and caller is None and w.rng.random() < 0.5

    def run():
        if group_only and not one_statement:
            with connection.cursor() as cursor:
                cursor.execute(
                    HOLD_ONE_STATEMENT,
                    {
                        "request": request.request_id,
                        "group": owner.group_id,
                        "key": key_id,
                        "amount": amount,
                        "now": now,
                        "expires": now + timedelta(seconds=ttl_s),
                    },
                )
                if cursor.fetchone() is None:
                    raise Refused("group budget")
            if sent:
                run_sync(mark_hold_sent(request.request_id))
            return "held"
        if one_statement:  # the request path's crash marker of a group without a budget
            with connection.cursor() as cursor:
                cursor.execute(
                    SENT_HOLD_ONE_STATEMENT,
                    {
                        "request": request.request_id,
                        "group": owner.group_id,
                        "key": key_id,
                        "amount": amount,
                        "now": now,
                        "expires": now + timedelta(seconds=ttl_s),
                    },
                )
            return "held"
        hold = Hold(
            request.request_id,
            owner.group_id,
            key_id,
            owner.key_budgeted[key_id],
            amount,
            caller,
        )
        run_sync(take_hold(hold, now=now, ttl_s=ttl_s))
        if sent:
            run_sync(mark_hold_sent(request.request_id))
        return "held"

    return (
        f"hold {request.request_id} {amount} sent={sent}",
        run,
        lambda _: w.requests.append(request),
    )


def plan_hold_and_reserve(w: World):
    """The request path's hold with its first reservation (a group-only hold, attempt 1), and
    what it does when the wallet refuses: the hold alone."""
    owner = w.rng.choice(w.owners)
    request = Request(w.request_id(), owner, w.rng.choice(owner.key_ids))
    amount = w.rng.choice([0, w.rng.randrange(1, 4_000), w.rng.randrange(1, 12_000)])
    escrow = w.rng.randrange(1, 6_000)
    now = w.now
    expires = now + timedelta(seconds=w.rng.randrange(5, 60))
    hold_params = {
        "request": request.request_id,
        "group": owner.group_id,
        "key": request.api_key_id,
        "amount": amount,
    }

    def run():
        with connection.cursor() as cursor:
            cursor.execute(
                HOLD_AND_RESERVE_STATEMENT,
                {
                    **hold_params,
                    "escrow": escrow,
                    "account": owner.account_id,
                    "now": now,
                    "expires": expires,
                },
            )
            row = cursor.fetchone()
            if row is not None:
                reservation_id, held = row
                if held:
                    return reservation_id
                # The group refused: the reservation was recorded with no call sent, and is
                # given back at once, as the escrow does.
                run_sync(cancel_reservation(reservation_id, now=now))
                raise Refused("group budget")
            cursor.execute(HOLD_ONE_STATEMENT, {**hold_params, "now": now, "expires": expires})
            if cursor.fetchone() is None:
                raise Refused("group budget")
            return None

    def record(reservation_id):
        w.requests.append(request)
        if reservation_id is not None:
            request.reservations.append(reservation_id)
            w.reservations.append((reservation_id, request.request_id, escrow))

    return f"hold {request.request_id} {amount} and reserve {escrow}", run, record


def plan_reserve(w: World):
    if not w.requests or w.rng.random() < 0.2:
        owner = w.rng.choice(w.owners)
        request = Request(w.request_id(), owner, w.rng.choice(owner.key_ids))
        new = True
    else:
        request, new = w.rng.choice(w.requests), False
    amount = w.rng.randrange(1, 6_000)
    ttl_s = w.rng.randrange(5, 60)
    one_statement = w.rng.random() < 0.5
    now = w.now
    attempt_no = len(request.reservations) + 1

    def run():
        owner = request.owner
        if one_statement:
            with connection.cursor() as cursor:
                cursor.execute(
                    RESERVE_ONE_STATEMENT,
                    {
                        "account": owner.account_id,
                        "request": request.request_id,
                        "group": owner.group_id,
                        "key": request.api_key_id,
                        "attempt": attempt_no,
                        "amount": amount,
                        "now": now,
                        "expires": now + timedelta(seconds=ttl_s),
                    },
                )
                row = cursor.fetchone()
            if row is None:
                raise Refused("wallet")
            return row[0]
        return run_sync(
            reserve(
                account_id=owner.account_id,
                request_id=request.request_id,
                group_id=owner.group_id,
                api_key_id=request.api_key_id,
                attempt_no=attempt_no,
                amount_micro=amount,
                now=now,
                ttl_s=ttl_s,
            )
        )

    def record(reservation_id):
        if new:
            w.requests.append(request)
        request.reservations.append(reservation_id)
        w.reservations.append((reservation_id, request.request_id, amount))

    return f"reserve {request.request_id} {amount}", run, record


def plan_commit(w: World):
    if not w.reservations:
        return plan_reserve(w)
    reservation_id, request_id, amount = w.rng.choice(w.reservations)
    cost = w.rng.randrange(0, 2 * amount + 1)  # above the hold too: the excess is recorded
    now = w.now
    return (
        f"commit {reservation_id} at {cost}",
        lambda: run_sync(commit_reservations({reservation_id: (request_id, cost)}, now=now)),
        None,
    )


def plan_cancel(w: World):
    if not w.reservations:
        return plan_reserve(w)
    reservation_id, _, _ = w.rng.choice(w.reservations)
    now = w.now
    return (
        f"cancel {reservation_id}",
        lambda: run_sync(cancel_reservation(reservation_id, now=now)),
        None,
    )


def usage_row(w: World, request: Request) -> UsageRecord:
    served = w.rng.choice([None, *request.reservations]) if request.reservations else None
    return UsageRecord(
        request_id=request.request_id,
        client_request_id="",
        created_at=w.now,
        account_id=None,
        group_id=request.owner.group_id,
        api_key_id=request.api_key_id,
        caller_label="",
        endpoint="chat",
        model_requested="m",
        model_served="m",
        provider="p",
        served_by="platform",
        tokens_in=0,
        tokens_out=0,
        byok_tokens_in=0,
        byok_tokens_out=0,
        provider_cost_micro=w.rng.choice([0, w.rng.randrange(1, 5_000)]),
        bytes_in=0,
        bytes_out=0,
        bandwidth_charge_micro=w.rng.choice([0, w.rng.randrange(1, 300)]),
        upstream_sent=True,
        status=200,
        error_code="",
        latency_ms=0,
        ttft_ms=None,
        streamed=False,
        reservation_id=served,
    )


def plan_settle(w: World):
    if not w.requests:
        return plan_hold(w)
    chosen = w.rng.sample(w.requests, min(len(w.requests), w.rng.randrange(1, 6)))
    rows = [usage_row(w, request) for request in chosen]
    now = w.now

    def run():
        with transaction.atomic():  # as the usage writer does, with the rows it stores
            settle_rows(rows, now=now)

    return f"settle {[r.request_id for r in rows]}", run, None


def plan_reap(w: World):
    now = w.now
    return f"reap at {now:%H:%M:%S}", lambda: expire_stale_holds(now=now), None


def plan_reconcile(w: World):
    if not w.requests:
        return plan_hold(w)
    chosen = w.rng.sample(w.requests, min(len(w.requests), w.rng.randrange(1, 4)))
    logged = [
        (r, w.rng.randrange(0, 400), w.rng.choice([0, w.rng.randrange(1, 3_000)])) for r in chosen
    ]
    now = w.now

    def run():
        marked = dict(
            SettledRequest.objects.filter(
                request_id__in=[r.request_id for r, _, _ in logged]
            ).values_list("request_id", "bandwidth_micro")
        )
        reconcile_window(
            window_start=now,
            rows=[
                LoggedCharge(
                    r.request_id,
                    r.owner.group_id,
                    r.api_key_id,
                    bandwidth,
                    cost,
                    marked.get(r.request_id),
                )
                for r, bandwidth, cost in logged
            ],
            logged_by_group={},
            now=now,
        )

    return f"reconcile {[r.request_id for r, _, _ in logged]}", run, None


def plan_top_up(w: World):
    owner = w.rng.choice(w.owners)
    amount = w.rng.randrange(1, 10_000)
    wallet = Wallet(pk=owner.wallet_id)
    return (
        f"top up {owner.wallet_id} {amount}",
        lambda: wallet_credit(wallet=wallet, amount_micro=amount, reason="fuzz"),
        None,
    )


def plan_adjust(w: World):
    owner = w.rng.choice(w.owners)
    amount = -w.rng.randrange(1, 15_000)
    wallet = Wallet(pk=owner.wallet_id)
    return (
        f"adjust {owner.wallet_id} {amount}",
        lambda: wallet_credit(
            wallet=wallet, amount_micro=amount, kind=LedgerEntry.Kind.ADJUSTMENT, reason="fuzz"
        ),
        None,
    )


PLANS = [
    (plan_hold, 5),
    (plan_hold_and_reserve, 3),
    (plan_reserve, 5),
    (plan_commit, 2),
    (plan_cancel, 2),
    (plan_settle, 4),
    (plan_reap, 2),
    (plan_reconcile, 2),
    (plan_top_up, 1),
    (plan_adjust, 1),
]


def attempt(run) -> tuple[str, object]:
    try:
        return "ok", run()
    except Refused:
        return "refused", None
    except OperationalError as exc:  # a transaction the database aborted, rolled back
        return f"aborted: {exc}".splitlines()[0], None


def in_threads(runs: list) -> list[tuple[str, object]]:
    results: list = [None] * len(runs)
    start = threading.Barrier(len(runs))

    def worker(index: int) -> None:
        try:
            start.wait()
            results[index] = attempt(runs[index])
        except BaseException as exc:  # reported in the main thread
            results[index] = ("crashed", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


# ---------------------------------------------------------------- the books


def check_books(w: World) -> None:
    """Assert every money invariant over the whole database."""
    held = SpendHold.objects.filter(status=SpendHold.Status.HELD)
    pending = Reservation.objects.filter(status=Reservation.Status.PENDING)

    for wallet in Wallet.objects.all():
        entries = list(
            LedgerEntry.objects.filter(wallet=wallet)
            .order_by("id")
            .values_list("amount_micro", "balance_after_micro")
        )
        running = 0
        for amount, after in entries:
            running += amount
            assert after == running, f"wallet {wallet.pk}: an entry's balance_after is off"
        assert wallet.balance_micro == running, f"wallet {wallet.pk}: balance != ledger sum"
        assert wallet.balance_micro >= wallet.reserved_micro >= 0, f"wallet {wallet.pk}"
        assert wallet.reserved_micro == sum(
            pending.filter(wallet=wallet).values_list("amount_micro", flat=True)
        ), f"wallet {wallet.pk}: reserved != its pending reservations"

    markers = list(
        SettledRequest.objects.values_list(
            "request_id", "group_id", "api_key_id", "bandwidth_micro", "provider_cost_micro"
        )
    )
    assert len({m[0] for m in markers}) == len(markers)
    # Whoever charged a request (its row, the reaper at its hold or reservation), the charge
    # names the request's key, budgeted or not: the key's spent is what its rows say.
    key_of = {r.request_id: r.api_key_id for r in w.requests}
    for request_id, _, api_key_id, _, _ in markers:
        if request_id in key_of:
            assert api_key_id == key_of[request_id], f"{request_id}: charged to another key"
    for group in Group.objects.all():
        assert group.reserved_micro == sum(
            held.filter(group=group).values_list("amount_micro", flat=True)
        ), f"group {group.pk}: reserved != its held holds"
        mine = [m for m in markers if m[1] == group.pk]
        assert group.spent_micro == sum(m[3] + m[4] for m in mine), (
            f"group {group.pk}: spent != what its markers charged"
        )
        assert group.settled_micro == sum(m[4] for m in mine), f"group {group.pk}: settled"
    for key in ApiKey.objects.all():
        assert key.reserved_micro == sum(
            held.filter(api_key=key).values_list("amount_micro", flat=True)
        ), f"key {key.pk}: reserved != its held holds"
        assert key.spent_micro == sum(m[3] + m[4] for m in markers if m[2] == key.pk), (
            f"key {key.pk}: spent != what its markers charged"
        )
    for spend in CallerSpend.objects.all():
        assert spend.reserved_micro == sum(
            held.filter(caller_spend=spend).values_list("amount_micro", flat=True)
        ), f"caller {spend.caller_label}: reserved != its held holds"
        assert spend.spent_micro >= 0

    commits = dict(
        LedgerEntry.objects.filter(kind=LedgerEntry.Kind.COMMIT).values_list(
            "reservation_id", "amount_micro"
        )
    )
    trueups: dict[tuple[int, str], int] = defaultdict(int)
    for wallet_id, reason, amount in LedgerEntry.objects.filter(
        kind=LedgerEntry.Kind.TRUEUP
    ).values_list("wallet_id", "reason", "amount_micro"):
        trueups[(wallet_id, reason)] += amount
    given_back: dict[tuple[int, str], int] = defaultdict(int)
    for r in Reservation.objects.exclude(status=Reservation.Status.PENDING):
        state = (r.status, r.committed_micro, r.excess_micro, r.unmeasured)
        first = w.resolved.setdefault(r.pk, state)
        if first != state:
            # The one change a resolved reservation may see, once: the reaper's unmeasured
            # commit trued up to its measured cost when the request's row arrives late.
            assert first[0] == state[0] == "committed" and first[3] and not state[3], (
                f"reservation {r.pk} resolved twice"
            )
            w.resolved[r.pk] = state
        assert 0 <= r.committed_micro <= r.amount_micro
        assert r.excess_micro == 0 or r.committed_micro == r.amount_micro
        if r.status == Reservation.Status.COMMITTED:
            # Its commit entry is what it committed first; a true-up (which may have come in
            # the very step of the reaper's commit, unseen between two checks) gave the wallet
            # back the difference from what it holds now, in its request's `trueup` entries.
            assert r.pk in commits, f"reservation {r.pk}: committed without its entry"
            first_commit = -commits[r.pk]
            assert first_commit >= r.committed_micro, f"reservation {r.pk}: its entry"
            given_back[(r.wallet_id, f"trueup: request {r.request_id}")] += (
                first_commit - r.committed_micro
            )
        else:
            assert r.pk not in commits and r.committed_micro == 0, f"reservation {r.pk}"
    assert set(commits) <= set(w.resolved), "a commit entry of a pending reservation"
    assert {k: v for k, v in given_back.items() if v} == dict(trueups), "true-ups != entries"
    for request_id, status in SpendHold.objects.exclude(status=SpendHold.Status.HELD).values_list(
        "request_id", "status"
    ):
        assert w.released.setdefault(request_id, status) == status, f"hold {request_id} twice"


@pytest.mark.parametrize("seed", SEEDS)
def test_random_money_steps_keep_the_books(transactional_db, seed):
    w = make_world(seed)
    weights = [weight for _, weight in PLANS]
    history: list[str] = []
    for step in range(STEPS):
        w.now += timedelta(seconds=w.rng.randrange(0, 8))
        burst = w.rng.random() < BURST
        plans = [
            w.rng.choices(PLANS, weights)[0][0](w)
            for _ in range(w.rng.randrange(2, 5) if burst else 1)
        ]
        descriptions = [p[0] for p in plans]
        if burst:
            results = in_threads([p[1] for p in plans])
        else:
            results = [attempt(plans[0][1])]
        for (description, _, record), (outcome, value) in zip(plans, results, strict=True):
            if outcome == "crashed":
                raise AssertionError(f"seed {seed} step {step}: {description} raised") from value
            w.outcomes[outcome.split(":")[0]] += 1
            if outcome == "ok" and record is not None:
                record(value)
        history.append(f"{step}: {' | '.join(descriptions)}")
        try:
            check_books(w)
        except (AssertionError, IntegrityError) as exc:
            recent = "\n".join(history[-8:])
            raise AssertionError(
                f"seed {seed} (replay: MONEY_FUZZ_SEED={seed}), after step {step}: {exc}\n"
                f"last steps:\n{recent}"
            ) from exc
    print(f"seed {seed}: {dict(w.outcomes)}")
    assert w.outcomes["ok"] > STEPS // 2


def books_of(w: World) -> dict:
    """Return one world's books, named by position so that two worlds compare."""
    books: dict[str, object] = {}
    for index, owner in enumerate(w.owners):
        wallet = Wallet.objects.get(pk=owner.wallet_id)
        group = Group.objects.get(pk=owner.group_id)
        books[f"owner {index}"] = {
            "wallet": (wallet.balance_micro, wallet.reserved_micro),
            # A batch writes its commits in reservation order: compare entries, not order.
            "ledger": sorted(
                LedgerEntry.objects.filter(wallet=wallet).values_list("kind", "amount_micro")
            ),
            "group": (group.spent_micro, group.settled_micro, group.reserved_micro),
            "keys": [
                tuple(ApiKey.objects.filter(pk=k).values_list("spent_micro", "reserved_micro")[0])
                for k in owner.key_ids
            ],
            "callers": sorted(
                CallerSpend.objects.filter(group_id=owner.group_id).values_list(
                    "caller_label", "spent_micro", "reserved_micro"
                )
            ),
        }
    cut = len(w.prefix)
    books["markers"] = sorted(
        (r[cut:], *rest)
        for r, *rest in SettledRequest.objects.filter(request_id__startswith=w.prefix).values_list(
            "request_id", "bandwidth_micro", "provider_cost_micro", "source"
        )
    )
    books["holds"] = sorted(
        (r[cut:], status)
        for r, status in SpendHold.objects.filter(request_id__startswith=w.prefix).values_list(
            "request_id", "status"
        )
    )
    books["reservations"] = sorted(
        (r[cut:], *rest)
        for r, *rest in Reservation.objects.filter(request_id__startswith=w.prefix).values_list(
            "request_id", "attempt_no", "status", "committed_micro", "excess_micro"
        )
    )
    return books


def settle_one_step_at_a_time(row: UsageRecord, *, now) -> None:
    """Settle one usage row through the single steps, each its own transaction."""
    reservation_id = row.reservation_id
    if reservation_id is not None:
        cost = (row.request_id, row.provider_cost_micro)
        run_sync(commit_reservations({reservation_id: cost}, now=now))
    held = run_sync(release_holds([row.request_id]))
    if row.provider_cost_micro or row.bandwidth_charge_micro:
        hold = held.get(row.request_id)
        assert row.group_id is not None  # a settled row is always a group's
        owed = Charge(
            row.request_id,
            row.group_id,
            row.api_key_id,
            hold.caller_spend_id if hold else None,
            row.provider_cost_micro,
            row.bandwidth_charge_micro,
        )
        run_sync(charge([owed], source="settle", now=now))


def test_a_batch_settles_exactly_as_its_rows_one_step_at_a_time(transactional_db):
    """settle (the batch form) and the single steps it chains leave the same books."""
    batched, single = make_world(11, prefix="batch"), make_world(11, prefix="single")
    opening = [(plan_hold, 3), (plan_reserve, 3)]
    for _ in range(40):  # the same holds and reservations in both worlds
        for w in (batched, single):
            description, run, record = w.rng.choices(opening, [3, 3])[0][0](w)
            outcome, value = attempt(run)
            if outcome == "ok" and record is not None:
                record(value)
    assert books_of(batched) == books_of(single)
    now = timezone.now()
    for _ in range(3):  # three batches: later ones replay some earlier rows
        batches = []
        for w in (batched, single):
            chosen = w.rng.sample(w.requests, min(len(w.requests), 12))
            batches.append([usage_row(w, request) for request in chosen])
        with transaction.atomic():
            settle_rows(batches[0], now=now)
        for row in batches[1]:
            settle_one_step_at_a_time(row, now=now)

        assert books_of(batched) == books_of(single)
    assert SettledRequest.objects.filter(request_id__startswith="batch").exists()
    check_books(batched)  # both worlds: balance_after chains, reserved = open holds, ...
