"""The reaper's composites: an expired reservation or budget hold resolved once, charged at
its hold if its call was sent (unmeasured), else released at 0."""

from __future__ import annotations

from datetime import datetime

from billing.ledger.charges import Charge, charge
from billing.ledger.counters import Moves, move_counters
from billing.ledger.holds import release_holds
from billing.ledger.periods import raise_alerts
from billing.ledger.sql import HOLDS, RESERVATIONS
from billing.ledger.wallet import cancel_reservation, commit_reservations
from core.sqlexec import Program


def reap_reservation(reservation_id: int, *, now: datetime) -> Program[bool]:
    """Resolve an expired reservation: committed at the hold if its call was sent, else expired.

    A sent call whose usage never arrived was served by a gateway that died: the wallet is
    debited the hold, marked unmeasured for reconciliation. A request that took no budget
    hold is charged to its group's and key's counters here too (raising the spend alerts a
    settled row would); one with a hold is charged with it.
    """
    row = yield (
        "SELECT call_sent, amount_micro, request_id, group_id, api_key_id"
        f" FROM {RESERVATIONS} WHERE id = %s AND status = 'pending'",
        (reservation_id,),
    )
    if row is None:
        return False  # resolved already (by settle, a cancel, or another reaper)
    sent, amount, request_id, group_id, api_key_id = row
    if not sent:
        return (yield from cancel_reservation(reservation_id, now=now, status="expired"))
    committed = yield from commit_reservations(
        {reservation_id: (request_id, amount)}, now=now, unmeasured=True
    )
    if not committed:
        return False
    hold = yield (f"SELECT id FROM {HOLDS} WHERE request_id = %s", (request_id,))
    if hold is None and group_id is not None:
        charged = yield from charge(
            [Charge(request_id, group_id, api_key_id, cost_micro=amount)], source="reaper", now=now
        )
        if charged:
            yield from raise_alerts(
                group_ids=[group_id], key_ids=[] if api_key_id is None else [api_key_id], now=now
            )
    return True


def reap_hold(request_id: str, *, now: datetime) -> Program[bool]:
    """Resolve an expired budget hold: charged if a platform call was sent, else released at 0.

    The charge is the hold (the request's worst case), unmeasured, to the counters its usage
    row would have charged: the group, the request's key (the hold names it, budgeted or
    not) and the caller it held on; and the spend alerts that charge reached are raised.
    """
    moves = Moves()
    held = yield from release_holds([request_id], reaped=True, moves=moves)
    if not held:
        return False
    h = held[request_id]
    charged: set[str] = set()
    if h.status == "charged":
        charged = yield from charge(
            [
                Charge(
                    request_id,
                    h.group_id,
                    h.request_key_id,
                    h.caller_spend_id,
                    h.amount_micro,
                    tag_spends=h.tag_spends,
                )
            ],  # fmt: skip
            source="reaper",
            now=now,
            moves=moves,
        )
    yield from move_counters(moves, now=now)
    if charged:  # the alerts a settled row's charge would raise (`settle`)
        yield from raise_alerts(
            group_ids=[h.group_id],
            key_ids=[] if h.request_key_id is None else [h.request_key_id],
            now=now,
        )
    return True
