"""Receipts reconciled with the wallet ledger (`manage.py verify_receipts` runs it).

Money moves on a wallet for a request only through ledger entries of three kinds: `commit`
(a reservation committed), `excess` (the cost above a hold, collected after its commit) and
`trueup` (a commit at the hold corrected when the usage arrived late). Each is written in
the transaction that writes the receipt naming it (billing/settlement.py, the reaper), whose
body says `wallet: {"ledger_entries": [ids], "taken_micro": N}`. So, for an account:

- every entry a receipt names is in its wallet's ledger, is of a request's kind, and is
  named once; the entries' amounts add up to what the receipt says was taken;
- every request's entry is named by a receipt (a receipt cut off the chain's end, or
  deleted, leaves its entries unnamed);
- each entry's balance after is the one before it plus its amount, and the last is the
  wallet's balance (an entry or the balance edited breaks the sum).

Receipts written before receipts named their entries (no `wallet` in the body) are not
reconciled: the entries before the first receipt that names its own are taken on trust.

Once months of receipts are archived and leave the database (billing/archives.py), their
entries stay (the ledger is kept for the life of the wallet) but no stored receipt names
them: the entries up to the last one the archived receipts name are reconciled in sum, with
what the archives' signed manifests say their wallets paid.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson
from django.db import connection, transaction

from billing.models import LedgerEntry, Receipt, ReceiptArchive, Wallet
from billing.receipts import Problem
from billing.statements import last_before

REQUEST_KINDS = frozenset(
    {LedgerEntry.Kind.COMMIT, LedgerEntry.Kind.EXCESS, LedgerEntry.Kind.TRUEUP}
)
CHUNK = 2_000


def ledger_accounts(*, only: Sequence[int] = ()) -> list[int]:
    """Return the accounts whose wallet moved money for a request (`only` those if given):
    an account whose every receipt was deleted still has its ledger to reconcile."""
    wallets = Wallet.objects.filter(ledger__kind__in=REQUEST_KINDS)
    if only:
        wallets = wallets.filter(account_id__in=list(only))
    return sorted(set(wallets.values_list("account_id", flat=True).distinct()))


def reconcile_account(account_id: int, *, since: datetime | None = None) -> list[Problem]:
    """Reconcile an account's receipts with its wallet's ledger; return what disagrees
    (nothing: they agree). `since`: only receipts settled and entries written from then on
    (the balance is then followed from the first such entry)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # One snapshot for the receipts, the ledger and the balance: a request settled
            # meanwhile is in all three or in none.
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _reconcile(account_id, since=since)


def _reconcile(account_id: int, *, since: datetime | None) -> list[Problem]:
    problems: list[Problem] = []
    wallet = Wallet.objects.filter(account_id=account_id).first()
    named: dict[int, int] = {}  # entry id -> the seq of the receipt naming it
    trusted_before: datetime | None = None  # entries before it predate named entries
    legacy = False
    archived = _archived(account_id) if since is None else None
    stored_archived_taken = 0  # what stored receipts an archive covers too (a kept head) paid
    for seq, settled_at, body in _receipts(account_id, since=since):
        stated = body.get("wallet") if isinstance(body, dict) else None
        if not isinstance(stated, dict):
            legacy = True
            continue
        if archived is not None and seq <= archived.through_seq:
            stored_archived_taken += int(stated.get("taken_micro") or 0)
        if trusted_before is None:
            trusted_before = settled_at
        entries = stated.get("ledger_entries") or []
        taken = stated.get("taken_micro")
        for entry_id in entries:
            if entry_id in named:
                problems.append(
                    Problem(seq, f"names ledger entry {entry_id}, named by receipt"
                            f" {named[entry_id]} too")
                )  # fmt: skip
            named[entry_id] = seq
        if entries and wallet is None:
            problems.append(Problem(seq, "names ledger entries, but the account has no wallet"))
        elif not entries and taken:
            problems.append(Problem(seq, f"says its wallet paid {taken}, but names no entry"))
    if wallet is None:
        return problems
    amounts: dict[int, int] = {}
    archived_paid = 0  # the archived receipts' entries, named by no stored receipt
    running: int | None = 0 if since is None else None
    last_id = None
    for entry in _entries(wallet.pk, since=since):
        entry_id, kind, amount, after, request_id, created_at = entry
        if running is None:
            running = after - amount  # `since`: followed from the first entry read
        if running + amount != after:
            problems.append(
                Problem(None, f"ledger entry {entry_id}: {running} {amount:+d} is not its"
                              f" balance after, {after}")
            )  # fmt: skip
        running = after
        last_id = entry_id
        if kind not in REQUEST_KINDS:
            if entry_id in named:
                problems.append(
                    Problem(named[entry_id], f"names ledger entry {entry_id}, a {kind} entry")
                )
            continue
        amounts[entry_id] = amount
        if entry_id not in named and archived is not None and entry_id <= archived.last_entry:
            archived_paid -= amount
            continue
        if entry_id not in named and not (
            legacy and (trusted_before is None or created_at < trusted_before)
        ):
            problems.append(
                Problem(None, f"ledger entry {entry_id} ({kind} {amount} for request"
                              f" {request_id or '?'}) is named by no receipt")
            )  # fmt: skip
    if last_id is not None and running != wallet.balance_micro:
        problems.append(
            Problem(None, f"the wallet's balance is {wallet.balance_micro}; its ledger ends at"
                          f" {running}")
        )  # fmt: skip
    if archived is not None and archived_paid != archived.taken_micro - stored_archived_taken:
        problems.append(
            Problem(None, f"the archived months' ledger entries took {archived_paid}; their"
                          f" archives say {archived.taken_micro - stored_archived_taken}")
        )  # fmt: skip
    problems += _taken_problems(account_id, amounts, since=since)
    return problems


@dataclass(frozen=True, slots=True)
class _Archived:
    """What an account's archives say of its wallet: through which seq and ledger entry, and
    what their receipts took in sum."""

    through_seq: int
    last_entry: int
    taken_micro: int


def _archived(account_id: int) -> _Archived | None:
    archives = list(ReceiptArchive.objects.filter(account_id=account_id))
    if not archives:
        return None
    return _Archived(
        through_seq=max(a.last_seq for a in archives),
        last_entry=max((a.ledger_last_entry or 0) for a in archives),
        taken_micro=sum(int(a.totals.get("wallet_taken_micro") or 0) for a in archives),
    )


def _taken_problems(
    account_id: int, amounts: dict[int, int], *, since: datetime | None
) -> list[Problem]:
    """Each receipt's stated amount taken against the entries it names."""
    problems = []
    for seq, _, body in _receipts(account_id, since=since):
        stated = body.get("wallet") if isinstance(body, dict) else None
        if not isinstance(stated, dict):
            continue
        taken = stated.get("taken_micro") or 0
        entries = stated.get("ledger_entries") or []
        missing = [e for e in entries if e not in amounts]
        for entry_id in missing:
            problems.append(
                Problem(seq, f"names ledger entry {entry_id}, which its wallet's ledger does"
                             " not hold as a request's entry")
            )  # fmt: skip
        paid = -sum(amounts.get(e, 0) for e in entries)
        if not missing and paid != taken:
            problems.append(
                Problem(seq, f"says its wallet paid {taken}; its ledger entries say {paid}")
            )
    return problems


def _receipts(account_id: int, *, since: datetime | None) -> Iterator[tuple[int, datetime, dict]]:
    """Yield (seq, settled_at, parsed body) of an account's receipts in chain order."""
    receipts = Receipt.objects.filter(account_id=account_id)
    if since is not None:
        before = last_before(account_id, since)
        receipts = receipts.filter(seq__gt=before.seq if before is not None else 0)
    after = None
    while True:
        chunk = receipts if after is None else receipts.filter(seq__gt=after)
        rows = list(chunk.order_by("seq").values_list("seq", "settled_at", "body")[:CHUNK])
        for seq, settled_at, text in rows:
            try:
                body = orjson.loads(text)
            except orjson.JSONDecodeError:
                body = {}  # the chain check says it was changed
            yield seq, settled_at, body
        if len(rows) < CHUNK:
            return
        after = rows[-1][0]


def _entries(wallet_id: int, *, since: datetime | None) -> Iterator[tuple]:
    """Yield a wallet's ledger entries in id order (the order they moved its balance):
    (id, kind, amount, balance after, request id, created_at)."""
    entries = LedgerEntry.objects.filter(wallet_id=wallet_id)
    if since is not None:
        entries = entries.filter(created_at__gte=since)
    after = None
    while True:
        chunk = entries if after is None else entries.filter(id__gt=after)
        rows = list(
            chunk.order_by("id").values_list(
                "id", "kind", "amount_micro", "balance_after_micro", "request_id", "created_at"
            )[:CHUNK]
        )
        yield from rows
        if len(rows) < CHUNK:
            return
        after = rows[-1][0]
