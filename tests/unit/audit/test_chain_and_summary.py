"""The audit trail's pure parts: the hash chain an auditor recomputes offline, the diff that
keeps only what changed, the refusal of secrets, and the change in words (dollars)."""

from __future__ import annotations

import hashlib
import json

import pytest

from audit.chain import GENESIS, HASHED_FIELDS, canonical, entry_hash, verify, verify_chains
from audit.services import SecretInTrail, _refuse_secrets, changes
from audit.summary import describe


def entry(seq: int, prev: str, **fields) -> dict:
    record = {
        "id": 100 + seq,
        "account": 7,
        "seq": seq,
        "created_at": f"2026-12-04T10:00:0{seq}.000001+00:00",
        "actor_kind": "user",
        "actor_id": 3,
        "actor_label": "ana",
        "remote_addr": "203.0.113.9",
        "action": "group.update",
        "target_type": "group",
        "target_id": "5",
        "target_label": "default",
        "before": {"budget_max_micro": seq},
        "after": {"budget_max_micro": seq + 1},
        "consent": "",
        "prev_hash": prev,
        **fields,
    }
    record["hash"] = entry_hash(prev, record)
    return record


def chain(length: int) -> list[dict]:
    entries, prev = [], GENESIS
    for seq in range(1, length + 1):
        entries.append(entry(seq, prev))
        prev = entries[-1]["hash"]
    return entries


def test_the_hash_is_sha256_of_the_previous_hash_and_the_canonical_json():
    first = entry(1, GENESIS)
    fields = {name: first[name] for name in HASHED_FIELDS}
    expected = hashlib.sha256(
        (
            GENESIS + json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        ).encode()
    ).hexdigest()
    assert first["hash"] == expected
    assert canonical({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


def test_an_intact_chain_verifies():
    verdict = verify(chain(4))
    assert (verdict.ok, verdict.checked, verdict.problem) == (True, 4, "")


def test_a_removed_entry_is_found():
    entries = chain(4)
    del entries[1]
    verdict = verify(entries)
    assert (verdict.ok, verdict.checked) == (False, 1)
    assert verdict.problem == "seq 3: expected seq 2 (missing)"


def test_a_removed_entry_with_renumbered_seqs_still_breaks_the_chain():
    entries = chain(3)
    del entries[1]
    entries[1] = {**entries[1], "seq": 2}
    verdict = verify(entries)
    assert verdict.problem == "seq 2: prev_hash is not the previous hash"


def test_an_edited_entry_is_found():
    entries = chain(3)
    entries[1]["after"] = {"budget_max_micro": 999}
    verdict = verify(entries)
    assert (verdict.ok, verdict.checked) == (False, 1)
    assert verdict.problem == "seq 2: the hash does not match its fields"


def test_a_mixed_export_is_checked_per_account_newest_first():
    mine = chain(3)
    theirs = [{**e, "account": 8} for e in chain(1)]
    theirs = [{**theirs[0], "hash": entry_hash(GENESIS, theirs[0])}]
    verdicts = verify_chains(list(reversed(mine)) + theirs)
    assert {k: (v.ok, v.checked) for k, v in verdicts.items()} == {7: (True, 3), 8: (True, 1)}


def test_changes_keep_only_what_differs_and_compare_nested_mappings_by_key():
    before = {"name": "a", "budget_max_micro": 5, "models": {"x": {"p": 1}, "y": {"p": 2}}}
    after = {"name": "a", "budget_max_micro": 7, "models": {"x": {"p": 1}, "z": {"p": 3}}}
    assert changes(before, after) == (
        {"budget_max_micro": 5, "models": {"y": {"p": 2}, "z": None}},
        {"budget_max_micro": 7, "models": {"y": None, "z": {"p": 3}}},
    )
    assert changes({"a": 1}, {"a": 1}) == ({}, {})


@pytest.mark.parametrize("name", ["key", "secret", "key_hash", "token_hash", "password"])
def test_a_secret_field_is_refused_at_any_depth(name):
    with pytest.raises(SecretInTrail):
        _refuse_secrets({"models": {"x": [{name: "sk-live"}]}})
    _refuse_secrets({"label": "ci", "last4": "4242", "prefix": "tgt_abcdef"})


def test_changes_read_in_dollars_with_every_digit():
    assert (
        describe(
            {"budget_max_micro": 5_000_000, "rpm_limit": None, "fallback": False},
            {"budget_max_micro": 12_345_678, "rpm_limit": 60, "fallback": True},
        )
        == "budget max: $5.00 → $12.345678; fallback: off → on; rpm limit: none → 60"
    )
    assert describe({}, {"balance_micro": 2_520, "amount_micro": -1}) == (
        "amount: -$0.000001; balance: $0.00252"
    )
    assert describe({"label": "ci", "keys": ["a (…1234)"]}, {}) == (
        "keys was a (…1234); label was ci"
    )
    # A row created or deleted: its empty fields say nothing; a field emptied still does.
    assert describe({}, {"name": "batch", "rpm_limit": None}) == "name: batch"
    assert describe({"rpm_limit": 5}, {"rpm_limit": None}) == "rpm limit: 5 → none"


def test_a_moment_reads_to_the_second_in_utc_not_as_raw_iso():
    assert describe({"revoked_at": None}, {"revoked_at": "2026-12-06T10:51:15.123456+00:00"}) == (
        "revoked at: none → 2026-12-06 10:51:15 UTC"
    )
    assert describe({}, {"expires_at": "2027-01-31T18:00:00-05:00"}) == (
        "expires at: 2027-01-31 23:00:00 UTC"
    )
    assert describe({}, {"name": "2026-12-06"}) == "name: 2026-12-06"  # a date is a word


def test_a_model_added_and_one_removed_read_field_by_field():
    before, after = changes(
        {"models": {"old": {"input_micro_per_mtok": 150_000}}},
        {"models": {"new": {"input_micro_per_mtok": 2_500_000}}},
    )
    assert describe(before, after) == (
        "models new input per 1M tokens: $2.50; models old input per 1M tokens was $0.15"
    )
