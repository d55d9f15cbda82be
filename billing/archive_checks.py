"""Check receipt archives (billing/archives.py) as a verifier reads them: a file against its
signed manifest, archives following on from each other and from the chain's start, the
stored chain continuing the last archive. `manage.py verify_receipts` runs these on the
store's archives and on the ones a tenant downloaded; billing/verification.py on the store's.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from billing.archives import archive_path, archives_of, manifest
from billing.chain_checks import check_chain
from billing.models import ReceiptArchive
from billing.receipts import GENESIS, Problem, verify_statement
from billing.statements import MonthSums


def archived_hash(account_id: int, seq: int) -> str | None:
    """The hash of an archived receipt (from its archive's manifest or file), None if no
    archive holds it."""
    archive = ReceiptArchive.objects.filter(
        account_id=account_id, first_seq__lte=seq, last_seq__gte=seq
    ).first()
    if archive is None:
        return None
    if archive.last_seq == seq:
        return archive.last_hash
    path = archive_path(account_id, archive.period)
    if not path.is_file():
        return None
    for record in read_records(path.read_bytes()):
        if record.get("seq") == seq:
            return str(record.get("hash"))
    return None


def read_records(data: bytes) -> list[dict[str, Any]]:
    """An archive file's receipts (ValueError: not a gzip'd JSON lines file)."""
    try:
        text = gzip.decompress(data)
        return [orjson.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, EOFError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a gzip'd JSON lines archive ({exc})") from None


def manifest_problems(document: Mapping[str, Any], public_keys: Mapping[str, str]) -> list[Problem]:
    """What is wrong with a manifest's signature (and its head's) (nothing: the operator's)."""
    period = document.get("period")
    return [
        Problem(p.seq, f"the archive {period}'s manifest: {_as_manifest(p.what)}")
        for p in verify_statement(document, public_keys)
    ]


def _as_manifest(what: str) -> str:
    """verify_statement's words, said of a manifest."""
    return what.removeprefix("the statement: ").replace("the statement", "it")


def check_archive(
    data: bytes, document: Mapping[str, Any], public_keys: Mapping[str, str]
) -> list[Problem]:
    """Hold an archive file against its manifest: the manifest's signature, the file's SHA-256
    and size, and its receipts: their chain (hashes, order, signatures), that they start at
    the manifest's prev and first_seq and end at its last_seq and last_hash, and their totals."""
    period = document.get("period")
    problems = manifest_problems(document, public_keys)
    if hashlib.sha256(data).hexdigest() != document.get("sha256"):
        problems.append(Problem(None, f"the archive {period}'s SHA-256 is not its manifest's"))
    if len(data) != document.get("size_bytes"):
        problems.append(Problem(None, f"the archive {period}'s size is not its manifest's"))
    try:
        records = read_records(data)
    except ValueError as exc:
        return [*problems, Problem(None, f"the archive {period}: {exc}")]
    account_id = int(document.get("account_id") or 0)
    check = check_chain(account_id, records, public_keys)
    problems += [Problem(p.seq, f"the archive {period}: {p.what}") for p in check.problems]
    sums = MonthSums()
    first_prev = None
    for record in records:
        try:
            body = orjson.loads(record["body"])
        except (KeyError, TypeError, orjson.JSONDecodeError):
            continue  # the chain check names it
        if first_prev is None:
            first_prev = body.get("prev")
        if body.get("account_id") != account_id:
            problems.append(
                Problem(record.get("seq"), f"the archive {period} holds another account's receipt")
            )
        sums.add(int(record.get("seq") or 0), str(record.get("hash")), body)
    said = {
        "first_seq": (sums.first_seq, document.get("first_seq")),
        "last_seq": (sums.last_seq, document.get("last_seq")),
        "last_hash": (sums.last_hash, document.get("last_hash")),
        "prev": (first_prev, document.get("prev")),
        "receipts": (sums.receipts, document.get("receipts")),
        "totals": (sums.totals(), document.get("totals")),
    }
    for name, (found, stated) in said.items():
        if found != stated:
            problems.append(
                Problem(None, f"the archive {period}'s {name} is {found!r}; its manifest says"
                              f" {stated!r}")
            )  # fmt: skip
    return problems


def check_continuity(
    documents: Sequence[Mapping[str, Any]], *, from_genesis: bool
) -> list[Problem]:
    """Archives in chain order must follow on: each one's prev the last hash before it, its
    first seq the one after; `from_genesis`, the first starts the chain."""
    problems = []
    last: Mapping[str, Any] | None = None
    for document in documents:
        period = document.get("period")
        if last is None:
            if from_genesis and (document.get("first_seq") != 1 or document.get("prev") != GENESIS):
                problems.append(
                    Problem(document.get("first_seq"), f"the archive {period} does not start the"
                            " chain: receipts before it are missing")
                )  # fmt: skip
        elif document.get("first_seq") != (last.get("last_seq") or 0) + 1 or document.get(
            "prev"
        ) != last.get("last_hash"):
            problems.append(
                Problem(document.get("first_seq"), f"the archive {period} does not follow on"
                        f" from the archive {last.get('period')} (missing, swapped or changed)")
            )  # fmt: skip
        last = document
    return problems


def check_stored_archives(account_id: int, public_keys: Mapping[str, str]) -> list[Problem]:
    """An account's archives as the store holds them: manifests signed, following on from the
    chain's start, and each file present and what its manifest says."""
    documents = [manifest(a) for a in archives_of(account_id)]
    problems = check_continuity(documents, from_genesis=True)
    for document in documents:
        path = archive_path(account_id, str(document["period"]))
        if not path.is_file():
            problems.append(Problem(None, f"the archive {document['period']}'s file is missing"))
            problems += manifest_problems(document, public_keys)
            continue
        problems += check_archive(path.read_bytes(), document, public_keys)
    return problems


def continues_from(
    last: Mapping[str, Any] | None, first_record: Mapping[str, Any] | None
) -> list[Problem]:
    """The stored chain (or an export) from its first receipt must continue the last archive:
    the archive's last receipt itself (an account's head is kept), or the one after it."""
    if last is None or first_record is None:
        return []
    seq = first_record.get("seq")
    try:
        prev = orjson.loads(first_record["body"]).get("prev")
    except (KeyError, TypeError, orjson.JSONDecodeError):
        prev = None
    if seq == last.get("last_seq") and first_record.get("hash") == last.get("last_hash"):
        return []
    if seq == (last.get("last_seq") or 0) + 1 and prev == last.get("last_hash"):
        return []
    return [
        Problem(seq, f"does not continue the archive {last.get('period')} (its last receipt is"
                     f" {last.get('last_seq')})")
    ]  # fmt: skip


def manifests_in(document: Any) -> list[dict[str, Any]]:
    """The manifests in a downloaded JSON: GET /api/receipts/archives's answer, a list of
    manifests or one."""
    if isinstance(document, Mapping) and "results" in document:
        document = document["results"]
    if isinstance(document, Mapping):
        document = [document]
    if not isinstance(document, Iterable):
        return []
    return [dict(m) for m in document if isinstance(m, Mapping)]
