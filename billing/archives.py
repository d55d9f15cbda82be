"""Receipt archives: with retention, an account's whole months of receipts leave PostgreSQL as
signed monthly files the tenant downloads and verifies offline.

An archive is one (account, month): the month's receipts exactly as GET /api/receipts answers
them (statements.receipt_record), one JSON line each, gzip'd, in the archive store
(TOLLGATE_ARCHIVE_DIR, `<account>/<YYYY-MM>.jsonl.gz`). Its manifest, a ReceiptArchive row
inserted only once the file is written, says what the file holds: the seq range, `prev` (the
hash before its first receipt: the chain continues across archives and into the store), the
last receipt's hash and signed head, the month's totals and the chain's running totals, and
the file's SHA-256 and size; it is signed like a statement (Ed25519 over the SHA-256 of its
canonical JSON, the newest receipt key).

Retention (TOLLGATE_RECEIPT_RETENTION_DAYS, 0: never) archives every whole month that ended
before the cutoff, then removes its receipts from PostgreSQL through the database's own
function (migration 0013: the application's role may not DELETE receipts), which removes
only receipts a manifest covers and never an account's last receipt, the chain's head.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.models import Account
from billing.models import Receipt, ReceiptArchive
from billing.receipts import GENESIS, sign_statement
from billing.statements import (
    MonthSums,
    last_before,
    month_bounds,
    month_of,
    receipt_record,
)
from core.config import tollgate
from core.sinks import rfc3339

MANIFEST_VERSION = 1
CHUNK = 2_000  # receipts read (and removed) at a time
SIGNED = ("hash", "key_id", "signature")


def archive_root() -> Path:
    return tollgate().archive_dir


def archive_path(account_id: int, period: str) -> Path:
    """Where an account's month is archived in the store."""
    return archive_root() / str(account_id) / f"{period}.jsonl.gz"


def manifest(archive: ReceiptArchive) -> dict[str, Any]:
    """An archive's signed manifest: what GET /api/receipts/archives lists and what
    `verify_receipts --archive` holds a downloaded file against."""
    return {
        **manifest_body(archive),
        "hash": hashlib.sha256(_canonical(manifest_body(archive))).hexdigest(),
        "key_id": archive.key_id,
        "signature": archive.signature,
    }


def manifest_body(archive: ReceiptArchive) -> dict[str, Any]:
    """The fields a manifest's signature covers."""
    return {
        "v": MANIFEST_VERSION,
        "account_id": archive.account_id,
        "period": archive.period,
        "time_zone": archive.time_zone,
        "starts_at": rfc3339(archive.starts_at),
        "ends_at": rfc3339(archive.ends_at),
        "first_seq": archive.first_seq,
        "last_seq": archive.last_seq,
        "prev": archive.prev,
        "last_hash": archive.last_hash,
        "receipts": archive.receipts,
        "totals": archive.totals,
        "running": archive.running,
        "head": archive.head,
        "ledger_last_entry": archive.ledger_last_entry,
        "sha256": archive.sha256,
        "size_bytes": archive.size_bytes,
        "created_at": rfc3339(archive.created_at),
    }


def _canonical(body: Mapping[str, Any]) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


# ---------------------------------------------------------------- what is archived


def archives_of(account_id: int) -> list[ReceiptArchive]:
    """An account's archives in chain order."""
    return list(ReceiptArchive.objects.filter(account_id=account_id).order_by("first_seq"))


def archived_through(account_id: int) -> ReceiptArchive | None:
    """The account's last archive (None: nothing archived)."""
    return ReceiptArchive.objects.filter(account_id=account_id).order_by("-last_seq").first()


def archive_before(account_id: int, moment: datetime) -> ReceiptArchive | None:
    """The account's last archive of a month that ended by `moment`."""
    return (
        ReceiptArchive.objects.filter(account_id=account_id, ends_at__lte=moment)
        .order_by("-last_seq")
        .first()
    )


def archive_month(*, account: Account, period: str, now: datetime) -> ReceiptArchive | None:
    """Write an account's month of receipts to the archive store and insert its signed
    manifest; return it (the existing one if the month is archived already, None if the month
    has no receipt after the last archive). The month must follow the account's last archive:
    its receipts are the chain from there to the last receipt settled before its end."""
    existing = ReceiptArchive.objects.filter(account_id=account.pk, period=period).first()
    if existing is not None:
        return existing
    start, end = month_bounds(period, time_zone=account.time_zone)
    if end > now:
        raise ValueError(f"{period} has not ended: only whole months are archived")
    previous = archived_through(account.pk)
    if previous is not None and previous.ends_at > start:
        raise ValueError(f"{period} is before the last archived month, {previous.period}")
    after_seq = previous.last_seq if previous is not None else 0
    closing = last_before(account.pk, end)
    last = closing.seq if closing is not None else None
    if last is None or last <= after_seq:
        return None
    path = archive_path(account.pk, period)
    sums, prev, head, ledger_last = _write_file(path, account.pk, after_seq, last)
    if (
        prev != (previous.last_hash if previous is not None else GENESIS)
        or sums.first_seq != after_seq + 1
        or sums.last_seq is None
        or sums.last_hash is None
    ):
        path.unlink(missing_ok=True)
        raise ValueError(f"receipts of {period} do not continue the chain from seq {after_seq}")
    data = path.read_bytes()
    archive = ReceiptArchive(
        account_id=account.pk,
        period=period,
        time_zone=account.time_zone,
        starts_at=start,
        ends_at=end,
        first_seq=sums.first_seq,
        last_seq=sums.last_seq,
        prev=prev,
        last_hash=sums.last_hash,
        receipts=sums.receipts,
        totals=sums.totals(),
        running=head.pop("running"),
        head=head,
        ledger_last_entry=ledger_last,
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        created_at=now,
        key_id="",
        signature="",
    )
    signed = sign_statement(manifest_body(archive))
    archive.key_id, archive.signature = signed["key_id"], signed["signature"]
    try:
        with transaction.atomic():
            archive.save()
    except IntegrityError:  # another worker archived it meanwhile (the same bytes)
        return ReceiptArchive.objects.get(account_id=account.pk, period=period)
    return archive


def _write_file(
    path: Path, account_id: int, after_seq: int, last_seq: int
) -> tuple[MonthSums, str, dict[str, Any], int | None]:
    """Write receipts (after_seq, last_seq] to `path` (atomically: a temporary file synced,
    then renamed); return their sums, the first's prev, the last's head and running totals,
    and the largest ledger entry id they name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sums = MonthSums()
    prev = ""
    head: dict[str, Any] = {}
    ledger_last: int | None = None
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as raw:
            # mtime 0: the same receipts make the same bytes, whoever writes them.
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as out:
                for receipt in _receipts(account_id, after_seq, last_seq):
                    body = orjson.loads(receipt.body)
                    if not prev:
                        prev = str(body.get("prev", ""))
                    sums.add(receipt.seq, receipt.hash, body)
                    named = (body.get("wallet") or {}).get("ledger_entries") or []
                    if named:
                        ledger_last = max(ledger_last or 0, *named)
                    head = {
                        "seq": receipt.seq,
                        "hash": receipt.hash,
                        "signature": receipt.signature,
                        "key_id": receipt.key_id,
                        "settled_at": rfc3339(receipt.settled_at),
                        "running": body.get("running"),
                    }
                    out.write(orjson.dumps(receipt_record(receipt)) + b"\n")
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return sums, prev, head, ledger_last


def _receipts(account_id: int, after_seq: int, last_seq: int) -> Iterator[Receipt]:
    while after_seq < last_seq:
        rows = list(
            Receipt.objects.filter(
                account_id=account_id, seq__gt=after_seq, seq__lte=last_seq
            ).order_by("seq")[:CHUNK]
        )
        if not rows:
            return
        yield from rows
        after_seq = rows[-1].seq


# ---------------------------------------------------------------- retention


@dataclass
class RetentionReport:
    archived: list[tuple[int, str]] = field(default_factory=list)  # (account, period)
    removed: int = 0  # receipts removed from PostgreSQL


def apply_receipt_retention(*, now: datetime | None = None) -> RetentionReport:
    """Archive, for every account, each whole month of receipts that ended before the cutoff
    (now less TOLLGATE_RECEIPT_RETENTION_DAYS), then remove the archived receipts from
    PostgreSQL but each account's last. Nothing while the setting is 0.

    Accounts are walked by id and each probed on the (account, seq) index: no pass over the
    receipts table, whose rows run to millions, to find the accounts that have some."""
    report = RetentionReport()
    days = tollgate().receipt_retention_days
    if not days:
        return report
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    for account in _accounts():
        previous = archived_through(account.pk)
        while (period := _month_due(account, previous, cutoff=cutoff)) is not None:
            archive = archive_month(account=account, period=period, now=now)
            if archive is None:  # a receipt settled out of time order: wait for the next month
                break
            report.archived.append((account.pk, period))
            previous = archived_through(account.pk)
        if previous is not None:
            report.removed += drop_archived(account.pk, through_seq=previous.last_seq)
    return report


def _accounts() -> Iterator[Account]:
    """Every account in id order, a page at a time (no cursor held across the archiving)."""
    after = 0
    while True:
        page = list(
            Account.objects.filter(pk__gt=after).only("pk", "time_zone").order_by("pk")[:CHUNK]
        )
        yield from page
        if len(page) < CHUNK:
            return
        after = page[-1].pk


def _month_due(
    account: Account, previous: ReceiptArchive | None, *, cutoff: datetime
) -> str | None:
    """Return the month to archive next: that of the account's first receipt after its last
    archive (`previous`), if the month ended by the cutoff; None if nothing is due.

    One probe of the (account, seq) index, no search by time: time follows the chain
    (statements.last_before), so the first receipt not archived is the oldest; if its month
    is not due, no later receipt's is."""
    after_seq = previous.last_seq if previous is not None else 0
    following = (
        Receipt.objects.filter(account_id=account.pk, seq__gt=after_seq)
        .order_by("seq")
        .values_list("settled_at", flat=True)
        .first()
    )
    if following is None:
        return None
    period = month_of(following, time_zone=account.time_zone)
    if month_bounds(period, time_zone=account.time_zone)[1] > cutoff:
        return None
    return period


def drop_archived(account_id: int, *, through_seq: int) -> int:
    """Remove an account's archived receipts up to `through_seq` from the database, but its
    last receipt, a chunk of seqs at a time; return how many. On PostgreSQL through the
    owner's function (the application's role may not DELETE receipts)."""
    first = (
        Receipt.objects.filter(account_id=account_id)
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    removed = 0
    upto = first
    while upto is not None and upto < through_seq:
        upto = min(upto + CHUNK, through_seq)
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT tollgate_drop_archived_receipts(%s, %s)", [account_id, upto]
                    )
                    removed += cursor.fetchone()[0]
            else:
                removed += _drop_on_sqlite(account_id, upto)
    return removed


def _drop_on_sqlite(account_id: int, through_seq: int) -> int:
    """The database function's rule, for the embedded run: archived, and never the head."""
    covered = archived_through(account_id)
    if covered is None or covered.last_seq < through_seq:
        raise ValueError(f"receipts of account {account_id} through {through_seq} not archived")
    head = Receipt.objects.filter(account_id=account_id).order_by("-seq").first()
    if head is None:
        return 0
    deleted, _ = Receipt.objects.filter(
        account_id=account_id, seq__lte=min(through_seq, head.seq - 1)
    ).delete()
    return deleted
