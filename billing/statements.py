"""Receipts read back: one request's receipts with the proof that reaches a signature, an
account's chain page by page, and a month's signed statement. Checking chains is
billing/chain_checks.py (what a verifier reads) and billing/verification.py (the store).

Receipts are written by billing/receipts.py, in the transaction of the charge each proves;
nothing here writes one. A period is a calendar month in the account's time zone (the one
its budget periods are cut in); its statement is signed like a receipt, and names the
chain's head at the period's end, the signed receipt that covers every receipt before it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import orjson
from django.db.models import Max, Min

from accounts.models import Account
from accounts.periods import MONTHLY, period_bounds
from audit import heads
from audit.services import signed_audit_head
from billing.models import Receipt, ReceiptArchive
from billing.receipt_keys import receipt_keys
from billing.receipts import (
    running_totals,
    sign_statement,
    signed_receipt_head,
)
from core.sinks import rfc3339

# A writer's batch (usage.writer.BATCH, 500 rows) ends on a signed receipt of each account.
PROOF_MAX = 1_000
PAGE_MAX = 1_000
CHUNK = 2_000  # receipts read at a time while verifying a chain
PERIOD = re.compile(r"^(\d{4})-(\d{2})$")
STATEMENT_VERSION = 1

# ---------------------------------------------------------------- periods


def month_bounds(period: str, *, time_zone: str) -> tuple[datetime, datetime]:
    """Return the UTC start and end of a month ("2026-12") in a time zone; ValueError if the
    period is not one."""
    found = PERIOD.match(period or "")
    if found is None or not 1 <= int(found[2]) <= 12 or int(found[1]) < 1970:
        raise ValueError("period must be a month, YYYY-MM")
    # The 15th at noon lies inside the month whatever the zone's offset.
    inside = datetime(int(found[1]), int(found[2]), 15, 12, tzinfo=ZoneInfo(time_zone))
    return period_bounds(MONTHLY, time_zone, inside)


def month_of(moment: datetime, *, time_zone: str) -> str:
    """Return the month ("2026-12") a moment falls in, in a time zone."""
    return f"{moment.astimezone(ZoneInfo(time_zone)):%Y-%m}"


def months_around(period: str) -> tuple[str, str]:
    """Return the months before and after `period` (a valid "YYYY-MM")."""
    year, month = int(period[:4]), int(period[5:])
    before = f"{year - 1}-12" if month == 1 else f"{year}-{month - 1:02d}"
    after = f"{year + 1}-01" if month == 12 else f"{year}-{month + 1:02d}"
    return before, after


# ---------------------------------------------------------------- reading receipts


def receipt_record(receipt: Receipt) -> dict[str, Any]:
    """Return what a verifier needs of a receipt: an API item, a line of an export."""
    return {
        "account_id": receipt.account_id,
        "seq": receipt.seq,
        "kind": receipt.kind,
        "request_id": receipt.request_id,
        "settled_at": rfc3339(receipt.settled_at),
        "body": receipt.body,
        "prev_hash": receipt.prev_hash,
        "hash": receipt.hash,
        "signature": receipt.signature,
        "key_id": receipt.key_id,
    }


def receipts_of_request(*, account_ids: Sequence[int], request_id: str) -> list[Receipt]:
    """Return a request's receipts in these accounts (a request may have several: charged at
    its hold, then trued up), in chain order."""
    return list(
        Receipt.objects.filter(account_id__in=list(account_ids), request_id=request_id).order_by(
            "account_id", "seq"
        )
    )


def proof_of(receipt: Receipt) -> list[Receipt]:
    """Return the receipts after `receipt` in its chain up to the first signed one (none if it
    is signed itself): hashed on from it, they reach a signature."""
    if receipt.signature:
        return []
    after = Receipt.objects.filter(account_id=receipt.account_id, seq__gt=receipt.seq)
    signed_seq = after.exclude(signature="").order_by("seq").values_list("seq", flat=True).first()
    if signed_seq is not None:
        after = after.filter(seq__lte=signed_seq)
    return list(after.order_by("seq")[:PROOF_MAX])


def request_receipts(*, account_ids: Sequence[int], request_id: str) -> list[dict[str, Any]]:
    """Return each receipt of a request with its parsed body (`document`) and its `proof`."""
    return [
        {
            **receipt_record(receipt),
            "document": orjson.loads(receipt.body),
            "proof": [receipt_record(r) for r in proof_of(receipt)],
        }
        for receipt in receipts_of_request(account_ids=account_ids, request_id=request_id)
    ]


def chain_page(
    *,
    account_id: int,
    after_seq: int = 0,
    before_seq: int | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    limit: int = 100,
    newest_first: bool = False,
) -> list[Receipt]:
    """Return up to `limit` of an account's receipts settled in [start, end), in chain order
    from after `after_seq` (or, `newest_first`, backwards from before `before_seq`)."""
    receipts = Receipt.objects.filter(account_id=account_id, seq__gt=after_seq)
    if before_seq is not None:
        receipts = receipts.filter(seq__lt=before_seq)
    # [start, end) is the chain after its last receipt settled before `start`, up to its last
    # settled before `end` (last_before), whatever the month's age. (Writers' clocks a little
    # apart may settle a receipt out of time order: it stays with its chain's month.)
    if start is not None:
        receipts = receipts.filter(seq__gt=seq_of(last_before(account_id, start)))
    if end is not None:
        receipts = receipts.filter(seq__lte=seq_of(last_before(account_id, end)))
    return list(receipts.order_by("-seq" if newest_first else "seq")[: min(limit, PAGE_MAX)])


def last_before(account_id: int, moment: datetime) -> Receipt | None:
    """The account's last receipt settled before `moment`: its chain's head then.

    Time follows an account's chain (a batch settles at once, under the chain's lock; writers'
    clocks apart by the lock's wait at most), so a binary search over seq finds it: about 23
    probes of the (account, seq) index for six million receipts, whatever the month's age,
    and no index of its own (one by time cost ~70 bytes a receipt, its pages half full)."""
    receipts = Receipt.objects.filter(account_id=account_id)
    bounds = receipts.aggregate(low=Min("seq"), high=Max("seq"))
    low, high = bounds["low"], bounds["high"]
    if low is None:
        return None

    def first_from(seq: int) -> tuple[int, datetime]:
        # The first stored receipt at or after `seq` (a seq archived away is skipped).
        found = (
            receipts.filter(seq__gte=seq).order_by("seq").values_list("seq", "settled_at").first()
        )
        assert found is not None  # seq <= high
        return found

    if first_from(low)[1] >= moment:
        return None
    while low < high:  # receipt `low` settled before `moment`; find the last that did
        seq, settled_at = first_from((low + high + 1) // 2)
        if settled_at < moment:
            low = seq
        else:
            high = (low + high + 1) // 2 - 1
    return receipts.get(seq=low)


def seq_of(receipt: Receipt | None) -> int:
    """A receipt's seq, 0 for none (the chain before its first)."""
    return receipt.seq if receipt is not None else 0


def published_keys() -> list[dict[str, Any]]:
    """Return the public part of every receipt key, newest first (the keys route's answer)."""
    keys = receipt_keys()
    return [
        {
            "key_id": key_id,
            "algorithm": "Ed25519",
            "public_key": public,
            "newest": key_id == keys.newest,
        }
        for key_id, public in keys.public().items()
    ]


# ---------------------------------------------------------------- statements


def statement(*, account: Account, period: str, now: datetime) -> dict[str, Any]:
    """Return an account's signed statement of a month: its receipts' count, seq range,
    totals and the hash of its last, and the chain's head at the month's end (the last
    receipt settled before it, signed: it covers every receipt before it). ValueError for a
    bad period.

    The totals are summed from the receipts' bodies, what their hashes and signatures cover,
    never from a column beside them: a column changed behind the chain's back changes no
    statement (verify_receipts names it)."""
    start, end = month_bounds(period, time_zone=account.time_zone)
    archived = ReceiptArchive.objects.filter(account_id=account.pk, period=period).first()
    head_document: dict[str, Any] | None
    if archived is not None:
        # Its receipts may have left the database: the month as its signed manifest states it.
        sums = MonthSums(
            receipts=archived.receipts,
            first_seq=archived.first_seq,
            last_seq=archived.last_seq,
            last_hash=archived.last_hash,
            **{k: v for k, v in archived.totals.items() if k != "total_micro"},
        )
        head_document = dict(archived.head)
    else:
        # A batch's receipts share one settled_at and its last is signed: the last receipt
        # settled before the end is a signed one. The month's totals are the running totals
        # at its end less those at its start, as the receipts' own bodies state them (or,
        # once the month before was archived, its manifest).
        before, head = last_before(account.pk, start), last_before(account.pk, end)
        opening = archived_opening(account.pk, start) if before is None else None
        between = month_between(before, head, opening=opening)
        # None: receipts from before running totals were kept: sum the month.
        sums = between if between is not None else month_sums(account.pk, start=start, end=end)
        head_document = (
            None
            if head is None
            else {
                "seq": head.seq,
                "hash": head.hash,
                "signature": head.signature,
                "key_id": head.key_id,
                "settled_at": rfc3339(head.settled_at),
            }
        )
    return sign_statement(
        {
            "v": STATEMENT_VERSION,
            "account_id": account.pk,
            "period": period,
            "time_zone": account.time_zone,
            "starts_at": rfc3339(start),
            "ends_at": rfc3339(end),
            "issued_at": rfc3339(now),
            "complete": now >= end,
            "receipts": sums.receipts,
            "first_seq": sums.first_seq,
            "last_seq": sums.last_seq,
            "last_hash": sums.last_hash,
            "totals": sums.totals(),
            "head": head_document,
            # Both chains' heads as they are now, signed: kept with the statement, they pin
            # the trail and the receipts against any later rewrite (audit/heads.py).
            "signed_heads": {
                "receipts": heads.document(signed_receipt_head(account.pk)),
                "audit": heads.document(signed_audit_head(account.pk)),
            },
        }
    )


@dataclass
class MonthSums:
    """A month's receipts summed from their bodies."""

    receipts: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash: str | None = None
    provider_cost_micro: int = 0
    bandwidth_micro: int = 0
    uncollected_micro: int = 0
    wallet_taken_micro: int = 0

    def add(self, seq: int, hash_: str, body: Mapping[str, Any]) -> None:
        amounts = body.get("amounts") or {}
        wallet = body.get("wallet") or {}
        self.receipts += 1
        self.first_seq = seq if self.first_seq is None else self.first_seq
        self.last_seq, self.last_hash = seq, hash_
        self.provider_cost_micro += int(amounts.get("provider_cost_micro") or 0)
        self.bandwidth_micro += int(amounts.get("bandwidth_micro") or 0)
        self.uncollected_micro += int(amounts.get("uncollected_micro") or 0)
        self.wallet_taken_micro += int(wallet.get("taken_micro") or 0)

    def totals(self) -> dict[str, int]:
        return {
            "provider_cost_micro": self.provider_cost_micro,
            "bandwidth_micro": self.bandwidth_micro,
            "total_micro": self.provider_cost_micro + self.bandwidth_micro,
            "uncollected_micro": self.uncollected_micro,
            "wallet_taken_micro": self.wallet_taken_micro,
        }


def archived_opening(account_id: int, start: datetime) -> tuple[int, dict[str, int]] | None:
    """Where the chain stood at `start` by the last archive of a month ended by then (its last
    seq and running totals; None: no such archive): the receipt before a month, once
    archived, is no longer in the database."""
    archive = (
        ReceiptArchive.objects.filter(account_id=account_id, ends_at__lte=start)
        .order_by("-last_seq")
        .first()
    )
    if archive is None:
        return None
    return archive.last_seq, {k: int(v) for k, v in archive.running.items()}


def month_between(
    before: Receipt | None,
    last: Receipt | None,
    *,
    opening: tuple[int, dict[str, int]] | None = None,
) -> MonthSums | None:
    """A month's sums from the running totals of the receipt before it (or `opening`: the
    seq and running totals an archive states) and of its last (None where a body states
    none: a chain from before they were kept)."""
    before_seq = seq_of(before)
    if opening is not None:
        before_seq, opening_totals = opening[0], running_totals({"running": opening[1]})
    else:
        opening_totals = running_totals(None if before is None else orjson.loads(before.body))
    closing = running_totals(None if last is None else orjson.loads(last.body))
    if opening_totals is None or closing is None:
        return None
    if last is None:  # nothing settled before the end but archived receipts
        closing, last_seq = opening_totals, before_seq
    else:
        last_seq = last.seq
    count = last_seq - before_seq
    return MonthSums(
        receipts=count,
        first_seq=before_seq + 1 if count else None,
        last_seq=last_seq if count else None,
        last_hash=last.hash if count and last is not None else None,
        **{name: closing[name] - opening_totals[name] for name in closing},
    )


def month_sums(account_id: int, *, start: datetime, end: datetime) -> MonthSums:
    """Sum an account's receipts settled in [start, end) from their bodies, in chain order."""
    sums = MonthSums()
    receipts = Receipt.objects.filter(
        account_id=account_id, settled_at__gte=start, settled_at__lt=end
    )
    after = 0
    while True:
        rows = list(
            receipts.filter(seq__gt=after)
            .order_by("seq")
            .values_list("seq", "hash", "body")[:CHUNK]
        )
        for seq, hash_, body in rows:
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                parsed = None
            sums.add(seq, hash_, parsed if isinstance(parsed, dict) else {})
        if len(rows) < CHUNK:
            return sums
        after = rows[-1][0]
