"""Settlement's composite: a batch of stored usage rows settled in one program (`settle`:
reservations committed, holds released, requests charged, alerts raised), and a request the
reaper charged at its hold corrected to what its late row measured (`true_up`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

from billing import tag_ledger
from billing.ledger.charges import Charge, charge
from billing.ledger.counters import Moves, move_counters
from billing.ledger.holds import release_holds
from billing.ledger.periods import raise_alerts
from billing.ledger.sql import HOLDS, RESERVATIONS, SETTLED, WALLETS, batch_rows, request_span
from billing.ledger.wallet import Committed, collect_excess, commit_reservations, insert_entries
from core.sqlexec import ALL, Program


@dataclass(frozen=True, slots=True)
class Settle:
    """What a stored usage row says its request owes."""

    request_id: str
    group_id: int | None
    api_key_id: int | None
    cost_micro: int
    bandwidth_micro: int
    reservation_id: int | None = None  # the served attempt's reservation, if it held one


@dataclass(frozen=True, slots=True)
class TrueUp:
    """A request charged at its hold by the reaper, corrected now that its row arrived."""

    cost_micro: int  # what its settled cost moved by (negative: refunded)
    bandwidth_micro: int  # what its bandwidth charge moved by
    wallet_micro: int  # what its wallet got back
    charged_before_micro: int  # what the reaper had charged its settled cost
    counters: bool  # the reaper had charged its counters (else only its wallet: it is
    # charged as any stored row is)


@dataclass
class WalletMoved:
    """What settling one request moved on its wallet: the ledger entries and their sum."""

    entries: list[int] = field(default_factory=list)
    taken_micro: int = 0  # taken from the wallet (negative: given back)
    uncollected_micro: int = 0  # measured above the hold that the wallet could not cover

    def took(self, c: Committed) -> None:
        self.entries += c.entries
        self.taken_micro += c.taken_micro
        self.uncollected_micro += c.uncollected_micro


@dataclass(frozen=True, slots=True)
class Settled:
    """What a settled batch did to each request: charged now, or trued up, and what each
    request's wallet paid (requests without a wallet move are absent from `wallet`)."""

    charged: set[str]
    trued_up: dict[str, TrueUp]
    wallet: dict[str, WalletMoved] = field(default_factory=dict)

    def uncollected_micro(self, request_id: str) -> int:
        moved = self.wallet.get(request_id)
        return moved.uncollected_micro if moved else 0


def settle(rows: list[Settle], *, now: datetime) -> Program[Settled]:
    """Apply the money of a batch of stored usage rows, each once.

    The served reservations are committed at measured cost (the excess over a hold collected
    as far as the wallet covers it), the requests' budget holds released, each request owing
    something charged (its caller through its hold) with what its wallet could not pay left
    out: the batch's counters move once per group, key and caller. A request the reaper
    charged at its hold before its row arrived is trued up to the row's measured cost
    (`true_up`).
    """
    if not rows:
        return Settled(set(), {})
    wallet: dict[str, WalletMoved] = defaultdict(WalletMoved)
    committed = yield from commit_reservations(
        {
            r.reservation_id: (r.request_id, r.cost_micro)
            for r in rows
            if r.reservation_id is not None
        },
        now=now,
    )
    for c in committed:
        wallet[c.request_id].took(c)
    moves = Moves()
    held = yield from release_holds([r.request_id for r in rows], moves=moves)
    trued = yield from true_up(rows, now=now, moves=moves, wallet=wallet)
    owing = []
    for r in rows:
        if (r.cost_micro or r.bandwidth_micro) and not (
            r.request_id in trued and trued[r.request_id].counters
        ):
            # Only a request with a principal owes (gateway/recording.py: no principal, no
            # platform call and no bandwidth charge), so an owing row has its group.
            assert r.group_id is not None
            h = held.get(r.request_id)
            moved = wallet.get(r.request_id)
            owing.append(
                Charge(
                    r.request_id,
                    r.group_id,
                    r.api_key_id,
                    h.caller_spend_id if h else None,
                    # Counters state what was taken: not what the wallet could not pay,
                    # which they state on its own.
                    r.cost_micro - (moved.uncollected_micro if moved else 0),
                    r.bandwidth_micro,
                    moved.uncollected_micro if moved else 0,
                    h.tag_spends if h else (),
                )
            )
    charged = yield from charge(owing, source="settle", now=now, moves=moves)
    yield from move_counters(moves, now=now)
    yield from raise_alerts(
        group_ids={c.group_id for c in owing if c.group_id is not None},
        key_ids={c.api_key_id for c in owing if c.api_key_id is not None},
        now=now,
    )
    return Settled(charged, trued, dict(wallet))


def true_up(
    rows: list[Settle],
    *,
    now: datetime,
    moves: Moves,
    wallet: dict[str, WalletMoved] | None = None,
) -> Program[dict[str, TrueUp]]:
    """Correct what the reaper charged at the hold to what the late rows measured, once.

    Two halves, each resolved once by its own flag: the reservations it committed unmeasured
    (committed again at the measured cost, as a settle would have: the difference given back
    to the wallet with one 'trueup' ledger entry, or a cost above the hold collected as
    `collect_excess` does) and the settled marker the reaper wrote (source 'reaper' ->
    'trueup', its group, key and caller counters moved by the difference to what was
    taken). The reaper may have done either half before the row arrived, or both. `wallet`
    gathers each request's wallet moves and entries.
    """
    if wallet is None:
        wallet = defaultdict(WalletMoved)
    by_id = {r.request_id: r for r in rows}
    ids = sorted(by_id)
    wanted, params = batch_rows(("text",), [(i,) for i in ids])
    lock = " FOR UPDATE OF s" if connection.vendor == "postgresql" else ""
    markers = yield (
        "SELECT s.request_id, s.provider_cost_micro, s.bandwidth_micro, s.group_id,"
        f" s.api_key_id, h.caller_spend_id FROM {SETTLED} s"
        f" LEFT JOIN {HOLDS} h ON h.request_id = s.request_id"
        f" WHERE s.source = 'reaper' AND s.request_id IN (SELECT * FROM ({wanted}) AS w)"
        f" AND s.request_id BETWEEN %s AND %s{lock}",
        (*params, *request_span(ids)),
        ALL,
    )
    lock = " FOR UPDATE" if connection.vendor == "postgresql" else ""
    reaped = yield (
        f"SELECT id, request_id, wallet_id, amount_micro, committed_micro FROM {RESERVATIONS}"
        f" WHERE status = 'committed' AND unmeasured"
        f" AND request_id IN (SELECT * FROM ({wanted}) AS w)"
        f" AND request_id BETWEEN %s AND %s ORDER BY id{lock}",
        (*params, *request_span(ids)),
        ALL,
    )
    if not markers and not reaped:
        return {}
    returned: dict[str, int] = defaultdict(int)
    for reservation_id, request_id, wallet_id, amount, committed in reaped:
        r = by_id[request_id]
        measured = r.cost_micro if reservation_id == r.reservation_id else 0
        now_committed = min(measured, amount)
        excess = max(measured - amount, 0)
        yield (
            f"UPDATE {RESERVATIONS} SET committed_micro = %s, excess_micro = %s,"
            " unmeasured = false WHERE id = %s AND request_id = %s RETURNING id",
            (now_committed, excess, reservation_id, request_id),
        )
        back = committed - now_committed
        returned[request_id] += back
        if back:
            balance = yield (
                f"UPDATE {WALLETS} SET balance_micro = balance_micro + %s, updated_at = %s"
                " WHERE id = %s RETURNING balance_micro",
                (back, now, wallet_id),
            )
            [(entry_id, _, _)] = yield from insert_entries(
                [
                    (
                        wallet_id, "trueup", back, balance[0], None,
                        f"trueup: request {request_id}", request_id,
                    )
                ],
                now=now,
            )  # fmt: skip
            wallet[request_id].took(Committed(reservation_id, request_id, -back, 0, 0, (entry_id,)))
        if excess:
            collected = yield from collect_excess(
                wallet_id, [(reservation_id, request_id, excess)], now=now
            )
            taken, left, excess_entry = collected[reservation_id]
            wallet[request_id].took(
                Committed(
                    reservation_id,
                    request_id,
                    0,
                    taken,
                    left,
                    (excess_entry,) if excess_entry else (),
                )
            )
    counters: dict[str, tuple[int, int, int]] = {}
    tagged = yield from tag_ledger.held_tags([m[0] for m in markers])
    for request_id, cost, bandwidth, group_id, api_key_id, caller_spend_id in markers:
        r = by_id[request_id]
        moved = wallet.get(request_id)
        taken_cost = r.cost_micro - (moved.uncollected_micro if moved else 0)
        yield (
            f"UPDATE {SETTLED} SET source = 'trueup', provider_cost_micro = %s,"
            " bandwidth_micro = %s WHERE request_id = %s AND source = 'reaper' RETURNING id",
            (taken_cost, r.bandwidth_micro, request_id),
        )
        # The reaper charged the hold, all of it taken: what this true-up could not collect
        # is all of the request's uncollected.
        difference = Charge(
            request_id,
            group_id,
            api_key_id,
            caller_spend_id,
            taken_cost - cost,
            r.bandwidth_micro - bandwidth,
            moved.uncollected_micro if moved else 0,
            tagged.get(request_id, ()),
        )
        moves.charged(difference)
        counters[request_id] = (difference.cost_micro, difference.bandwidth_micro, cost)
    return {
        request_id: TrueUp(
            cost_micro=counters.get(request_id, (0, 0, 0))[0],
            bandwidth_micro=counters.get(request_id, (0, 0, 0))[1],
            wallet_micro=returned.get(request_id, 0),
            charged_before_micro=counters.get(request_id, (0, 0, 0))[2],
            counters=request_id in counters,
        )
        for request_id in sorted(set(counters) | set(returned))
    }
