"""Guardrails on the answer: the output phase, on a whole answer or on a stream as it goes.

The principal's guardrails whose phase is `output` or `both` check the answer's text
(gateway/shapes/texts.py says which texts), after the cache: a replayed answer is checked
like a fresh one. Those that scan spans here (`detectors`, `custom`) run first, then those
that call out (`webhook`, `moderation`: gateway/guarding.py `check_remote`) on the text as it
would be sent. An answer with no text (embeddings, moderations) is not checked.

A whole answer (`guard_answer`) is checked before anything is sent: block answers LM-2030
instead of the answer (the vendor's usage is billed: the call was made and paid in full),
redact rewrites the answer in the vendor's shape before it is rendered, flag counts.

A stream (`AnswerGuard`) is checked as it goes. Each guardrail holds back the end of the
text it has not yet cleared (guardrails/streaming.py: at most 363 characters, longer only
inside a private key block or a JWT-shaped run), so a value split across chunks is still
caught. The text it releases rides the text events it came in: an event whose text is all
held is not sent, and what is held when a non-text event arrives (the end of a text block or
of the answer) is sent first, in a copy of the last text event. A block sends the text
before the value, then ends the stream with LM-2030 in the client's shape: the request is
billed what was delivered (gateway/types.py StreamResult), never the held text. Each
guardrail's verdict says whether it saw the whole answer (`complete`): a stream cut before
its end (the vendor, the client, the deadline) is never recorded as passed.

A stream with a guardrail that calls out is held whole instead (the endpoint or the model
needs all of it): scanned, asked about, then sent at once; a block sends no text, and the
stream is billed like a whole answer, at what the vendor said it used.

A Responses vendor repeats a text block's whole text in the events that close it; when a
guardrail rewrote the block, those strings are replaced by what the client was sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core import errors
from gateway.guarding import (
    REMOTE_KINDS,
    SCANNING_KINDS,
    Verdict,
    blocked_message,
    check_remote,
    note_verdict,
    scan_texts,
    scanner_for,
    texts_of,
)
from gateway.shapes.texts import ANSWER_WALKS, answer_text, rewrite_answer_texts
from gateway.types import ANTHROPIC, OPENAI, RESPONSES, Chunk, Completion
from guardrails.streaming import StreamScanner

if TYPE_CHECKING:
    from gateway.context import ModelContext
    from guardrails.selectors import GuardrailSpec

OUTPUT_PHASES = frozenset({"output", "both"})
# A Responses vendor's events that repeat a finished text block's text.
RESPONSES_CLOSING = frozenset(
    {
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
        "response.incomplete",
    }
)


def output_guardrails(ctx: ModelContext) -> tuple[GuardrailSpec, ...]:
    """Return the request's guardrails that check its answer (none: one tuple test)."""
    principal = ctx.principal
    if principal is None or not principal.guardrails:
        return ()
    return tuple(spec for spec in principal.guardrails if spec.phase in OUTPUT_PHASES)


def split_kinds(
    specs: Sequence[GuardrailSpec],
) -> tuple[tuple[GuardrailSpec, ...], tuple[GuardrailSpec, ...]]:
    """Split guardrails into the ones that scan here and the ones that call out."""
    scanning = tuple(spec for spec in specs if spec.kind in SCANNING_KINDS)
    return scanning, tuple(spec for spec in specs if spec.kind in REMOTE_KINDS)


async def guard_answer(ctx: ModelContext, completion: Completion) -> Completion:
    """Check a whole answer with the output guardrails (those that scan, then those that
    call out, on the text as it would be sent); return it, rewritten where one redacts.
    Raises GuardrailBlocked (LM-2030)."""
    specs = output_guardrails(ctx)
    if not specs or completion.shape not in ANSWER_WALKS:  # embeddings, moderations: no text
        return completion
    scanning, remote = split_kinds(specs)
    data = completion.data
    for spec in scanning:
        data, kinds = scan_texts(spec, completion.shape, data, walk=rewrite_answer_texts)
        verdict = Verdict(spec.name, "output", spec.action, len(kinds), tuple(dict.fromkeys(kinds)))
        note_verdict(ctx, spec, verdict)
        if spec.action == "block" and kinds:
            raise errors.GuardrailBlocked(blocked_message(verdict))
    if remote:
        texts = texts_of(completion.shape, data, walk=rewrite_answer_texts)
        for spec in remote:
            await check_remote(ctx, spec, "output", texts)
    if data is completion.data:
        return completion
    return replace(completion, data=data, text=answer_text(completion.shape, data))


def answer_guard(ctx: ModelContext) -> AnswerGuard | None:
    """Return the guard for a streamed answer, or None when no guardrail checks it."""
    specs = output_guardrails(ctx)
    return AnswerGuard(ctx, specs) if specs else None


class AnswerGuard:
    """One streamed answer's output guardrails, chained: what the first releases, the second
    is fed, and so on; the client gets what the last releases."""

    def __init__(self, ctx: ModelContext, specs: Sequence[GuardrailSpec]) -> None:
        self.ctx = ctx
        self.specs, self.remote = split_kinds(specs)
        self._remote_asked = 0  # how many of the remote ones were asked (a cut stream: not all)
        self.scanners = [
            StreamScanner(
                scanner_for(spec),
                spec.action,  # type: ignore[arg-type]  # the model's choices
            )
            for spec in self.specs
        ]
        self.blocked: Verdict | None = None
        self._template: Chunk | None = None  # the last text event: held text leaves in a copy
        self._raw: list[str] = []  # the open text block, as it arrived
        self._sent: list[str] = []  # ... and as it was released
        self._rewritten: dict[str, str] = {}  # a closed block's text -> what was sent of it

    async def checked(self, chunks: AsyncIterator[list[Chunk]]) -> AsyncIterator[list[Chunk]]:
        """The stream as the client may get it: after a block, the text before the value,
        then GuardrailBlocked once the vendor's stream is closed (nothing more is made)."""
        if self.remote:
            yield await self._checked_whole(chunks)
            return
        async for arrived in chunks:
            passed = self.guard(arrived)
            if passed:
                yield passed
            if self.blocked is not None:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
                raise self.error()
        # A vendor that ends on a text event (no end event after it): what is held goes now.
        rest = self._close_block()
        if rest:
            assert self._template is not None  # held text came in a text event
            yield [with_text(self._template, rest)]
        if self.blocked is not None:
            raise self.error()

    async def _checked_whole(self, chunks: AsyncIterator[list[Chunk]]) -> list[Chunk]:
        """Hold the whole answer, scan it, ask the guardrails that call out about the text
        it would send, and return it all. A block sends no text: the stream is billed like
        a whole answer, at what the vendor said it used."""
        held = [arrived async for arrived in chunks]
        out: list[Chunk] = []
        try:
            for arrived in held:
                out += self.guard(arrived)
                if self.blocked is not None:
                    raise self.error()
            rest = self._close_block()
            if self.blocked is not None:
                raise self.error()
            if rest:
                assert self._template is not None  # held text came in a text event
                out.append(with_text(self._template, rest))
            text = "".join(chunk.text for chunk in out)
            for spec in self.remote:
                self._remote_asked += 1
                await check_remote(self.ctx, spec, "output", [text])
        except errors.GuardrailBlocked:
            stream = self.ctx.stream
            if stream is not None:  # what it used, none of it sent
                for arrived in held:
                    for chunk in arrived:
                        stream.fold(chunk)
            raise
        return out

    def guard(self, arrived: list[Chunk]) -> list[Chunk]:
        """Return what of these chunks may go to the client now. After a block it returns
        the text before the value; `blocked` is then set and the stream is to end."""
        out: list[Chunk] = []
        for chunk in arrived:
            if self.blocked is not None:
                break
            if chunk.text:
                self._template = chunk
                self._raw.append(chunk.text)
                released = self._feed(chunk.text)
                if chunk.finish_reason is not None or chunk.usage is not None:
                    released += self._close_block()
                if released == chunk.text:
                    out.append(chunk)
                elif released or chunk.finish_reason is not None or chunk.usage is not None:
                    out.append(with_text(chunk, released))
                continue
            if chunk.event is None:
                out.append(chunk)
                continue
            rest = self._close_block()
            if rest:
                assert self._template is not None  # held text came in a text event
                out.append(with_text(self._template, rest))
            if self.blocked is None:
                out.append(self._closing(chunk) if self._rewritten else chunk)
        return out

    def verdicts(self) -> tuple[Verdict, ...]:
        """Each guardrail's verdict so far: `complete` only when it saw the whole answer."""
        verdicts = []
        for spec, scanner in zip(self.specs, self.scanners, strict=True):
            kinds = tuple(dict.fromkeys(match.kind for match in scanner.matches))
            # A block decided; otherwise only text scanned to its end is a verdict on it.
            complete = scanner.blocked is not None or scanner.scanned_chars == scanner.fed_chars
            verdicts.append(
                Verdict(spec.name, "output", spec.action, scanner.match_count, kinds, complete)
            )
        return tuple(verdicts)

    def note(self, ctx: ModelContext) -> None:
        """Record each guardrail's verdict on the request (however its stream ended); a
        guardrail that calls out records its own when asked, and one never asked (the
        stream ended first) is recorded as not having seen the answer."""
        for spec, verdict in zip(self.specs, self.verdicts(), strict=True):
            note_verdict(ctx, spec, verdict)
        for spec in self.remote[self._remote_asked :]:
            note_verdict(ctx, spec, Verdict(spec.name, "output", spec.action, 0, complete=False))

    def error(self) -> errors.GuardrailBlocked:
        assert self.blocked is not None
        return errors.GuardrailBlocked(blocked_message(self.blocked))

    def _feed(self, piece: str) -> str:
        for index, scanner in enumerate(self.scanners):
            piece = scanner.feed(piece) if piece else ""
            if scanner.blocked is not None:
                return self._block(index, piece)
        self._sent.append(piece)
        return piece

    def _close_block(self) -> str:
        """End the open text block: every guardrail releases what it holds."""
        if not self._raw:
            return ""
        text = ""
        for index, scanner in enumerate(self.scanners):
            text = (scanner.feed(text) if text else "") + scanner.finish()
            if scanner.blocked is not None:
                return self._block(index, text)
        self._sent.append(text)
        raw, sent = "".join(self._raw), "".join(self._sent)
        if raw != sent:
            self._rewritten[raw] = sent
        self._raw, self._sent = [], []
        return text

    def _block(self, index: int, before: str) -> str:
        """Guardrail `index` blocked: the text before its value goes through the others."""
        scanner = self.scanners[index]
        assert scanner.blocked is not None
        spec = self.specs[index]
        kinds = tuple(dict.fromkeys(match.kind for match in scanner.matches))
        self.blocked = Verdict(spec.name, "output", spec.action, scanner.match_count, kinds)
        for later in self.scanners[index + 1 :]:
            before = (later.feed(before) if before else "") + later.finish()
        return before

    def _closing(self, chunk: Chunk) -> Chunk:
        """A Responses vendor's closing event with each rewritten block's text replaced."""
        event = chunk.event
        if chunk.shape != RESPONSES or event is None or event.get("type") not in RESPONSES_CLOSING:
            return chunk
        return replace(chunk, event=_replace_strings(event, self._rewritten))


def with_text(chunk: Chunk, text: str) -> Chunk:
    """A copy of a text chunk carrying `text` instead, in its vendor's shape."""
    event = chunk.event
    if event is not None:
        event = EVENT_TEXT[chunk.shape](event, text)
    return replace(chunk, event=event, text=text, generated=bool(text))


def _openai_text(event: dict, text: str) -> dict:
    choices = [
        {**c, "delta": {**(c.get("delta") or {}), "content": text}} if c.get("index", 0) == 0 else c
        for c in event.get("choices") or ()
    ]
    return {**event, "choices": choices}


def _anthropic_text(event: dict, text: str) -> dict:
    return {**event, "delta": {**(event.get("delta") or {}), "text": text}}


def _responses_text(event: dict, text: str) -> dict:
    return {**event, "delta": text}


EVENT_TEXT = {OPENAI: _openai_text, ANTHROPIC: _anthropic_text, RESPONSES: _responses_text}


def _replace_strings(value: Any, rewritten: dict[str, str]) -> Any:
    if isinstance(value, str):
        return rewritten.get(value, value)
    if isinstance(value, dict):
        return {key: _replace_strings(item, rewritten) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_strings(item, rewritten) for item in value]
    return value
