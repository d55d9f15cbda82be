"""Check an account's receipts as a verifier reads them (an API page, an export, the store's
rows): the chain (billing/receipts.py verify_chain), the running totals, and every column or
field that repeats the body, against it. Pure: no database."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from billing.receipts import GENESIS, Problem, own_amounts, running_totals, stated, verify_chain

# What a receipt's columns (or an export's fields) repeat of its body: each must agree.
STATED = (
    ("account_id", ("account_id",)),
    ("seq", ("seq",)),
    ("request_id", ("request_id",)),
    ("kind", ("kind",)),
    ("group_id", ("group_id",)),
    ("api_key_id", ("api_key_id",)),
    ("cost_micro", ("amounts", "provider_cost_micro")),
    ("bandwidth_micro", ("amounts", "bandwidth_micro")),
    ("prev_hash", ("prev",)),
    ("settled_at", ("settled_at",)),
)


@dataclass
class ChainCheck:
    """What checking one account's chain found."""

    account_id: int
    receipts: int = 0
    head_seq: int | None = None
    head_key_id: str = ""
    problems: list[Problem] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """The command's report: one line for the account, then one per problem."""
        said = f"account {self.account_id}: {self.receipts} receipts"
        if self.intact:
            said += ", chain intact"
            if self.head_seq is not None:
                said += f", head {self.head_seq} signed by {self.head_key_id or '(nobody)'}"
            return [said]
        count = len(self.problems)
        return [
            f"{said}, {count} problem{'s' if count != 1 else ''}",
            *(f"  {p}" for p in self.problems),
        ]


def check_chain(
    account_id: int,
    records: Iterable[Mapping[str, Any]],
    public_keys: Mapping[str, str],
    *,
    head: tuple[int, str] | None = None,
    from_genesis: bool = False,
) -> ChainCheck:
    """Check one account's receipts, given in chain order (the store's rows as receipt_record
    dicts plus their amount columns, or an export's lines): the chain (verify_chain, with the
    store's `head` to catch a cut-off tail), each field that repeats the body against it, and,
    `from_genesis`, that the chain starts at receipt 1."""
    check = ChainCheck(account_id=account_id)
    own: list[Problem] = []

    def examined() -> Iterator[Mapping[str, Any]]:
        last: Mapping[str, Any] | None = None
        running: dict[str, int] | None = None  # the previous receipt's running totals
        previous_seq: Any = None
        for record in records:
            check.receipts += 1
            seq = record.get("seq")
            try:
                body = orjson.loads(record["body"])
            except orjson.JSONDecodeError:
                body = None
            if not isinstance(body, dict):
                own.append(Problem(seq, "its body is not a JSON object (changed)"))
                # Stand in for it so the chain reads on: its hash still fails.
                body = {"seq": seq, "prev": record.get("prev_hash")}
                record = {**record, "body": orjson.dumps(body).decode()}
            if (
                check.receipts == 1
                and from_genesis
                and (body.get("seq") != 1 or body.get("prev") != GENESIS)
            ):
                own.append(
                    Problem(
                        body.get("seq"), "the chain starts here: receipts before it are missing"
                    )
                )
            # Named by the seq its body states (what its hash and signature cover).
            for column, path in STATED:
                if column in record and record[column] != stated(body, path):
                    own.append(
                        Problem(
                            body.get("seq", seq),
                            f"its {column} says {record[column]!r}, its body"
                            f" {stated(body, path)!r}",
                        )
                    )
            # Each receipt's running totals are the one before's plus its own amounts (the
            # first checked, or the first that keeps them, is taken as it says).
            stated_running = running_totals(body)
            follows = previous_seq is not None and body.get("seq") == previous_seq + 1
            if follows and running is not None and stated_running is not None:
                own_part = own_amounts(body)
                expected = {name: running[name] + own_part[name] for name in running}
                if stated_running != expected:
                    own.append(Problem(body.get("seq", seq), "its running totals do not follow on"))
            running, previous_seq = stated_running, body.get("seq")
            last = record
            yield record
        if last is not None:
            check.head_seq, check.head_key_id = last.get("seq"), last.get("key_id") or ""

    chain_problems = verify_chain(examined(), public_keys, head=head)
    if from_genesis and head is not None and head[0] and check.receipts == 0:
        chain_problems.append(
            Problem(head[0], f"the chain's head is receipt {head[0]}, but none is stored: cut off")
        )
    check.problems = sorted([*own, *chain_problems], key=lambda p: p.seq or 0)
    return check
