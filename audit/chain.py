"""The audit trail's hash chain: pure functions, so an export is verified without Tollgate.

Each account's entries form one chain (operator-wide entries, with no account, another):
entry n carries `prev_hash` (entry n-1's hash, or GENESIS for the first) and
`hash = sha256(prev_hash + canonical JSON of the entry's recorded fields)`. Removing,
reordering or editing an entry breaks every hash after it; `seq` numbers each chain from 1,
so a removed entry also leaves a gap, and the chain's head (its last seq and hash) is kept
apart from the entries for a removed tail.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GENESIS = "0" * 64
# The recorded fields, as exported (JSON lines) and hashed; `id`, `prev_hash` and `hash`
# are the chain itself.
HASHED_FIELDS = (
    "account",
    "seq",
    "created_at",
    "actor_kind",
    "actor_id",
    "actor_label",
    "remote_addr",
    "action",
    "target_type",
    "target_id",
    "target_label",
    "before",
    "after",
    "consent",
)


def canonical(payload: Mapping[str, Any]) -> bytes:
    """Return the one byte string a payload hashes as: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def entry_hash(prev_hash: str, payload: Mapping[str, Any]) -> str:
    """Return sha256(prev_hash + canonical(payload)) in hex, over the hashed fields only."""
    fields = {name: payload[name] for name in HASHED_FIELDS}
    return hashlib.sha256(prev_hash.encode() + canonical(fields)).hexdigest()


@dataclass(frozen=True)
class Verdict:
    """What a chain check found: `ok`, how many entries it checked, and the first problem."""

    ok: bool
    checked: int
    problem: str = ""


def verify(entries: Iterable[Mapping[str, Any]]) -> Verdict:
    """Check one chain's entries (in seq order, from seq 1): consecutive seqs, each entry's
    prev_hash the previous entry's hash, each hash recomputed from the entry."""
    prev, checked = GENESIS, 0
    for entry in entries:
        expected_seq = checked + 1
        where = f"seq {entry.get('seq')}"
        if entry.get("seq") != expected_seq:
            return Verdict(False, checked, f"{where}: expected seq {expected_seq} (missing)")
        if entry.get("prev_hash") != prev:
            return Verdict(False, checked, f"{where}: prev_hash is not the previous hash")
        if entry_hash(prev, entry) != entry.get("hash"):
            return Verdict(False, checked, f"{where}: the hash does not match its fields")
        prev, checked = entry["hash"], expected_seq
    return Verdict(True, checked)


def verify_chains(entries: Iterable[Mapping[str, Any]]) -> dict[int | None, Verdict]:
    """Check every chain in a mixed export (e.g. JSON lines, newest first): per account."""
    chains: dict[int | None, list[Mapping[str, Any]]] = {}
    for entry in entries:
        chains.setdefault(entry.get("account"), []).append(entry)
    return {
        account: verify(sorted(rows, key=lambda row: row.get("seq") or 0))
        for account, rows in chains.items()
    }
