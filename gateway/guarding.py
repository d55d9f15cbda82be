"""Guardrails on the request path: the input stage, before anything is planned or held.

A request's guardrails come with its principal (guardrails.selectors.guardrails_for, loaded
on an auth-cache miss and evicted with the account), so a request whose key, group and
account carry none pays one empty-tuple test. Each input guardrail of the built-in kinds
(`detectors`, `custom`) scans every prompt text the client's shape carries
(gateway/shapes/texts.py), in the order the selector gives:

- block: any value found refuses the request (LM-2030, naming the guardrail and the kinds it
  found, never the text). Nothing is planned, held or sent, so nothing is billed.
- redact: each value is replaced (`[REDACTED:<kind>]`) in the body the vendor will get; the
  client's own body is not changed, and the cache keys the redacted one.
- flag: the request goes on unchanged.

A webhook guardrail (gateway/guard_hooks.py) is sent the same texts (redacted by the
guardrails before it), and a moderation guardrail sends them to its moderation model as a
request of its own (gateway/guard_moderation.py); each blocks or flags on the answer, and a
check that gives no verdict fails open (recorded `failed`) or closed (LM-2030), as the
guardrail says (`check_remote`, which the output phase uses too).

Every guardrail that ran leaves a `Verdict` on the context (how many values it found, never
which), so the request's record says what was checked, and counts on
tollgate_guardrail_verdicts_total. A client has no say: no header or
field turns a guardrail off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from core import errors, metrics
from core.config import tollgate
from gateway.guard_hooks import check_with_webhook
from gateway.guard_moderation import check_with_moderation
from gateway.runtime import runtime
from gateway.shapes.texts import Rewrite, rewrite_texts
from guardrails.custom import compile_custom
from guardrails.detectors import BUILTIN_KINDS, Scanner
from guardrails.matches import redact

if TYPE_CHECKING:
    from datetime import datetime

    from gateway.context import ModelContext
    from gateway.types import ModelRequest
    from guardrails.selectors import GuardrailSpec

log = logging.getLogger(__name__)

INPUT_PHASES = frozenset({"input", "both"})
TextWalk = Callable[[str, dict, Rewrite], dict]
SCANNING_KINDS = frozenset({"detectors", "custom"})
REMOTE_KINDS = frozenset({"webhook", "moderation"})  # they call out: gateway/guard_hooks.py


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one guardrail did to a request: never what it found, only how many."""

    guardrail: str
    phase: str  # "input" or "output"
    action: str  # "block", "redact" or "flag"
    matches: int
    kinds: tuple[str, ...] = ()  # the kinds of the values found, each once, in order
    # False: the answer's stream ended before the guardrail saw all of it (a cut stream).
    complete: bool = True
    failed: bool = False  # a check that calls out gave no verdict (its fail mode let it on)
    check: str = ""  # a moderation's check: the request id of its own usage row

    def as_json(self) -> dict:
        recorded = {
            "guardrail": self.guardrail,
            "phase": self.phase,
            "action": self.action,
            "matches": self.matches,
        }
        if not self.complete:
            recorded["complete"] = False
        if self.failed:  # only when true: a row without it was checked
            recorded["failed"] = True
        if self.check:
            recorded["check"] = self.check
        return recorded


async def guard_input(ctx: ModelContext, req: ModelRequest) -> ModelRequest:
    """Run the principal's input guardrails on the request; return the request the vendor
    is to get (redacted where a guardrail redacts). Raises GuardrailBlocked (LM-2030)."""
    principal = ctx.principal
    if principal is None or not principal.guardrails:
        return req
    body = req.body
    for spec in principal.guardrails:
        if spec.phase not in INPUT_PHASES:
            continue
        if spec.kind in REMOTE_KINDS:
            # The texts as the vendor would get them: after the redactions before it.
            await check_remote(ctx, spec, "input", texts_of(req.shape, body))
            continue
        body, kinds = scan_texts(spec, req.shape, body)
        verdict = Verdict(spec.name, "input", spec.action, len(kinds), tuple(dict.fromkeys(kinds)))
        note_verdict(ctx, spec, verdict)
        if spec.action == "block" and kinds:
            raise errors.GuardrailBlocked(blocked_message(verdict))
    return req if body is req.body else replace(req, body=body)


def scan_texts(
    spec: GuardrailSpec, shape: str, body: dict, *, walk: TextWalk = rewrite_texts
) -> tuple[dict, list[str]]:
    """Scan a body's texts (its prompt's; an answer's with walk=rewrite_answer_texts) with
    one guardrail: the body (redacted when it redacts and found something) and the kinds of
    the values found, in order."""
    scanner = scanner_for(spec)
    redacting = spec.action == "redact"
    kinds: list[str] = []

    def scan(text: str) -> str:
        found = scanner.scan(text)
        kinds.extend(match.kind for match in found)
        return redact(text, found) if redacting and found else text

    return walk(shape, body, scan), kinds


def note_verdict(ctx: ModelContext, spec: GuardrailSpec, verdict: Verdict) -> None:
    """Keep a verdict for the request's record and count it."""
    ctx.guardrail_verdicts += (verdict,)
    result = "clean" if not verdict.matches else "matched"
    if not verdict.complete:
        result = "partial"
    if verdict.failed:
        result = "failed"
    metrics.GUARDRAIL_VERDICTS.labels(spec.kind, verdict.phase, spec.action, result).inc()


def blocked_message(verdict: Verdict) -> str:
    found = ", ".join(verdict.kinds)
    return (
        f"Blocked by guardrail {verdict.guardrail!r} ({verdict.phase}): it found"
        f" {verdict.matches} value{'s' if verdict.matches != 1 else ''} of kind {found}."
    )


async def check_remote(
    ctx: ModelContext, spec: GuardrailSpec, phase: str, texts: list[str]
) -> None:
    """Ask a guardrail that calls out (its webhook, or its moderation model through
    gateway/guard_moderation.py) about texts, and record its verdict; raise GuardrailBlocked
    when it flags and blocks, or gives no verdict and fails closed. A failure that fails open
    is recorded as failed, never as checked and clean."""
    if spec.kind == "moderation":
        outcome = await check_with_moderation(ctx, spec, texts=texts)
        flagged_by = "its moderation model flagged"
    else:
        outcome = await check_with_webhook(
            spec,
            phase=phase,
            texts=texts,
            request_id=ctx.request_id,
            session=runtime.session,
            allow_nets=tollgate().web_allow_nets,
        )
        flagged_by = "its endpoint flagged"
    verdict = Verdict(
        spec.name,
        phase,
        spec.action,
        outcome.matches,
        outcome.kinds,
        failed=outcome.failed,
        check=outcome.check,
    )
    note_verdict(ctx, spec, verdict)
    where = f"Blocked by guardrail {spec.name!r} ({phase})"
    what = "the request" if phase == "input" else "the answer"
    if outcome.failed:
        log.warning("guardrail %s (id %s) gave no verdict: %s", spec.name, spec.id, outcome.failure)
        if spec.fail_mode == "closed":
            raise errors.GuardrailBlocked(
                f"{where}: it could not check {what} ({outcome.failure}) and fails closed."
            )
    elif outcome.flagged and spec.action == "block":
        kinds = f" ({', '.join(outcome.kinds)})" if outcome.kinds else ""
        raise errors.GuardrailBlocked(f"{where}: {flagged_by} {what}{kinds}.")


def texts_of(shape: str, body: dict, *, walk: TextWalk = rewrite_texts) -> list[str]:
    """The texts of a body (its prompt's; an answer's with walk=rewrite_answer_texts), in
    the order the walk takes them."""
    texts: list[str] = []

    def collect(text: str) -> str:
        texts.append(text)
        return text

    walk(shape, body, collect)
    return texts


def scanner_for(spec: GuardrailSpec) -> Scanner:
    """A guardrail's scanner, compiled once per version of it (its id and update time)."""
    return _compiled(spec.id, spec.updated_at, spec.kind, spec.detectors, spec.patterns, spec.words)


@lru_cache(maxsize=512)
def _compiled(
    guardrail_id: int,
    updated_at: datetime,
    kind: str,
    detectors: tuple[str, ...],
    patterns: tuple[str, ...],
    words: tuple[str, ...],
) -> Scanner:
    if kind == "custom":
        return Scanner((), custom=compile_custom(patterns, words))
    return Scanner(detectors or BUILTIN_KINDS)
