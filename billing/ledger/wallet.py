"""The wallet: a platform attempt's reservation (`reserve`), committed at measured cost with
its ledger entry (`commit_reservations`, the excess over the hold by `collect_excess`) or
cancelled, and credits an operator or a payment adds (`credit_wallet`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from billing.ledger.sql import (
    LEDGER_ENTRIES,
    RESERVATION_COLUMNS,
    RESERVATIONS,
    WALLETS,
    Refused,
    batch_rows,
    request_span,
    wallet_covers,
)
from core.sqlexec import ALL, Program


def reserve(
    *,
    account_id: int,
    request_id: str,
    group_id: int,
    api_key_id: int | None,
    attempt_no: int,
    amount_micro: int,
    now: datetime,
    ttl_s: int,
) -> Program[int]:
    """Hold a platform attempt's worst case on the wallet, or refuse (LM-4002).

    Taken right before the vendor call, so the reservation records the call as sent: a
    crash from here on leaves a served request, which the reaper commits.
    """
    row = yield (
        f"UPDATE {WALLETS} SET reserved_micro = reserved_micro + %s, updated_at = %s"
        f" WHERE account_id = %s AND {wallet_covers('%s')} RETURNING id",
        (amount_micro, now, account_id, amount_micro),
    )
    if row is None:
        raise Refused("wallet")
    row = yield (
        f"INSERT INTO {RESERVATIONS} ({RESERVATION_COLUMNS})"
        " VALUES (%s, %s, %s, %s, %s, %s, 0, 0, 'pending', TRUE, FALSE, %s, %s) RETURNING id",
        (
            row[0],
            request_id,
            group_id,
            api_key_id,
            attempt_no,
            amount_micro,
            now,
            now + timedelta(seconds=ttl_s),
        ),
    )
    return row[0]


# wallet, kind, amount, balance after, reservation, reason, request (created_at: the statement's)
_LEDGER_ENTRY_TYPES = ("bigint", "text", "bigint", "bigint", "bigint", "text", "text")
_LEDGER_ENTRY_COLUMNS = (
    "wallet_id, kind, amount_micro, balance_after_micro, reservation_id, reason, request_id"
)


@dataclass(frozen=True, slots=True)
class Committed:
    """What committing one reservation took from its wallet, and the ledger entries that
    say so (its receipt names them)."""

    reservation_id: int
    request_id: str
    debited_micro: int  # the commit: the measured cost, at most the hold
    collected_micro: int = 0  # the excess over the hold, collected after the commit
    uncollected_micro: int = 0  # the excess the wallet could not cover
    entries: tuple[int, ...] = ()  # the commit's entry, then the excess's if one was taken

    @property
    def taken_micro(self) -> int:
        return self.debited_micro + self.collected_micro


def insert_entries(
    entries: list[tuple], *, now: datetime
) -> Program[list[tuple[int, int | None, str]]]:
    """Insert ledger entries (rows of _LEDGER_ENTRY_TYPES); return (id, reservation id,
    request id) of each, in id order."""
    if not entries:
        return []
    source, params = batch_rows(_LEDGER_ENTRY_TYPES, entries)
    rows = yield (
        f"INSERT INTO {LEDGER_ENTRIES} ({_LEDGER_ENTRY_COLUMNS}, created_at)"
        f" SELECT *, %s FROM ({source}) AS entries RETURNING id, reservation_id, request_id",
        (now, *params),
        ALL,
    )
    return sorted(rows)


def collect_excess(
    wallet_id: int, excesses: list[tuple[int, str, int]], *, now: datetime
) -> Program[dict[int, tuple[int, int, int | None]]]:
    """Collect what committed reservations cost above their holds, once, from the wallet.

    `excesses`: (reservation id, request id, excess) of reservations this transaction just
    committed (each resolves once: its commit moved it from pending). The wallet pays each in
    order from what it has available (balance minus what other requests hold): never into a
    negative balance nor into another request's hold, so the bound below zero is 0. Each
    amount taken is one 'excess' ledger entry; what the wallet could not cover is recorded
    on the reservation as uncollected. Returns reservation id -> (collected, uncollected,
    its entry's id or None).
    """
    if not excesses:
        return {}
    row = yield (
        f"UPDATE {WALLETS} SET updated_at = %s WHERE id = %s"
        " RETURNING balance_micro, reserved_micro",
        (now, wallet_id),
    )
    balance, reserved = row
    available = max(balance - reserved, 0)
    taken: dict[int, tuple[int, int]] = {}
    for reservation_id, _, excess in excesses:
        collected = min(excess, available)
        available -= collected
        taken[reservation_id] = (collected, excess - collected)
    total = sum(collected for collected, _ in taken.values())
    if total:
        row = yield (
            f"UPDATE {WALLETS} SET balance_micro = balance_micro - %s WHERE id = %s"
            f" AND {wallet_covers('%s')} RETURNING balance_micro",
            (total, wallet_id, total),
        )
        assert row is not None, "the wallet changed under its own lock"
    entries = []
    for reservation_id, request_id, _ in excesses:
        collected = taken[reservation_id][0]
        if collected:
            balance -= collected
            entries.append(
                (
                    wallet_id, "excess", -collected, balance, None,
                    f"excess over the hold: request {request_id}", request_id,
                )
            )  # fmt: skip
    inserted = yield from insert_entries(entries, now=now)
    entry_of = {request_id: entry_id for entry_id, _, request_id in inserted}
    source, params = batch_rows(
        ("bigint", "text", "bigint", "bigint"),
        [(r, q, *taken[r]) for r, q, _ in excesses],
    )
    yield (
        f"WITH taken (id, request_id, collected, uncollected) AS ({source})"
        f" UPDATE {RESERVATIONS} SET collected_micro = taken.collected,"
        " uncollected_micro = taken.uncollected FROM taken"
        f" WHERE {RESERVATIONS}.id = taken.id AND {RESERVATIONS}.request_id = taken.request_id"
        f" AND {RESERVATIONS}.request_id BETWEEN %s AND %s RETURNING {RESERVATIONS}.id",
        (*params, *request_span(q for _, q, _ in excesses)),
        ALL,
    )
    return {r: (*taken[r], entry_of.get(q) if taken[r][0] else None) for r, q, _ in excesses}


def commit_reservations(
    costs: dict[int, tuple[str, int]], *, now: datetime, unmeasured: bool = False
) -> Program[list[Committed]]:
    """Commit pending reservations at their cost, once; return what each took, in id order.

    `costs`: reservation id -> (its request id, measured cost). The request ids bound the
    reservation partitions the statement reads (see `request_span`).

    The wallet is debited the cost up to the hold and its hold released, one commit ledger
    entry each; a cost above the hold is then collected from what the wallet has available
    (`collect_excess`: an 'excess' entry, the rest recorded as uncollected). `unmeasured`
    marks the reaper's commits at the hold of a served request whose usage never arrived.
    A reservation resolved already (settled, cancelled, reaped) is left as it is.
    """
    if not costs:
        return []
    served, params = batch_rows(
        ("bigint", "text", "bigint"),
        sorted((id_, request_id, cost) for id_, (request_id, cost) in costs.items()),
    )
    rows = yield (
        f"WITH served (id, request_id, cost) AS ({served})"
        f" UPDATE {RESERVATIONS} SET status = 'committed',"
        " committed_micro = CASE WHEN served.cost < amount_micro THEN served.cost"
        " ELSE amount_micro END,"
        " excess_micro = CASE WHEN served.cost > amount_micro THEN served.cost - amount_micro"
        " ELSE 0 END, unmeasured = %s, resolved_at = %s"
        f" FROM served WHERE {RESERVATIONS}.id = served.id"
        f" AND {RESERVATIONS}.request_id = served.request_id"
        f" AND {RESERVATIONS}.status = 'pending'"
        f" AND {RESERVATIONS}.request_id BETWEEN %s AND %s"
        f" RETURNING {RESERVATIONS}.id, wallet_id, amount_micro, committed_micro,"
        f" {RESERVATIONS}.request_id, excess_micro",
        (*params, unmeasured, now, *request_span(r for r, _ in costs.values())),
        ALL,
    )
    wallets: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # released, debited
    by_wallet: dict[int, list[tuple[int, int, str, int]]] = defaultdict(list)
    for reservation_id, wallet_id, amount, committed, request_id, excess in sorted(rows):
        wallets[wallet_id][0] += amount
        wallets[wallet_id][1] += committed
        by_wallet[wallet_id].append((reservation_id, committed, request_id, excess))
    label = "unmeasured: request" if unmeasured else "request"
    done: list[Committed] = []
    for wallet_id, (released, debited) in sorted(wallets.items()):
        row = yield (
            f"UPDATE {WALLETS} SET reserved_micro = reserved_micro - %s,"
            " balance_micro = balance_micro - %s, updated_at = %s WHERE id = %s"
            " RETURNING balance_micro",
            (released, debited, now, wallet_id),
        )
        balance = row[0] + debited  # walk this wallet's commits in order
        commits = []
        for reservation_id, committed, request_id, _ in by_wallet[wallet_id]:
            balance -= committed
            commits.append(
                (
                    wallet_id, "commit", -committed, balance, reservation_id,
                    f"{label} {request_id}", request_id,
                )
            )  # fmt: skip
        inserted = yield from insert_entries(commits, now=now)
        entry_of = {reservation_id: entry_id for entry_id, reservation_id, _ in inserted}
        collected = yield from collect_excess(
            wallet_id,
            [(r, q, excess) for r, _, q, excess in by_wallet[wallet_id] if excess],
            now=now,
        )
        for reservation_id, committed, request_id, _ in by_wallet[wallet_id]:
            taken, left, excess_entry = collected.get(reservation_id, (0, 0, None))
            entries = (entry_of[reservation_id],) + ((excess_entry,) if excess_entry else ())
            done.append(Committed(reservation_id, request_id, committed, taken, left, entries))
    return sorted(done, key=lambda c: c.reservation_id)


def cancel_reservation(
    reservation_id: int, *, now: datetime, status: str = "cancelled"
) -> Program[bool]:
    """Release a pending reservation at 0, once: 'cancelled' (its call failed) or 'expired'."""
    row = yield (
        f"UPDATE {RESERVATIONS} SET status = %s, committed_micro = 0, excess_micro = 0,"
        " resolved_at = %s WHERE id = %s AND status = 'pending' RETURNING wallet_id, amount_micro",
        (status, now, reservation_id),
    )
    if row is None:
        return False  # resolved already (by settle, the reaper, or a cancel)
    yield (
        f"UPDATE {WALLETS} SET reserved_micro = reserved_micro - %s, updated_at = %s"
        " WHERE id = %s RETURNING id",
        (row[1], now, row[0]),
    )
    return True


def credit_wallet(
    wallet_id: int, *, amount_micro: int, kind: str, reason: str, now: datetime, actor: str = ""
) -> Program[int]:
    """Add to (or, negative, correct) a wallet's balance with a ledger entry; return its id.

    Kinds: 'opening', 'topup', 'adjustment'. Refused if a correction would take the balance
    below what the wallet holds. `actor`: the operator who typed it, if one did.
    """
    row = yield (
        f"UPDATE {WALLETS} SET balance_micro = balance_micro + %s, updated_at = %s"
        " WHERE id = %s AND balance_micro + %s >= reserved_micro RETURNING balance_micro",
        (amount_micro, now, wallet_id, amount_micro),
    )
    if row is None:
        raise Refused("the correction would take the wallet below its holds")
    entry = yield (
        f"INSERT INTO {LEDGER_ENTRIES} (wallet_id, kind, amount_micro, balance_after_micro,"
        " reservation_id, reason, actor, created_at) VALUES (%s, %s, %s, %s, NULL, %s, %s, %s)"
        " RETURNING id",
        (wallet_id, kind, amount_micro, row[0], reason, actor, now),
    )
    return entry[0]


# A refused reservation's one read: what the wallet has available.
WALLET_AVAILABLE_READ = (
    f"SELECT balance_micro - reserved_micro FROM {WALLETS} WHERE account_id = %(account)s"
)
