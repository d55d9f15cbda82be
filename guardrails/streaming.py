"""Scanning an answer while it streams: `StreamScanner` is fed the text pieces as they arrive
and releases text only once no value can still be forming across what it has not seen.

The hold-back. Every built-in detector but two matches at most `Scanner.max_chars`
characters (an email address's 272 is the longest), so text more than HOLD_BACK_CHARS (300)
from the end is final: a value starting there has been seen whole. Two credentials are longer
and get their own rule: from a `-----BEGIN ... PRIVATE KEY-----` line with no END line yet,
and from a JWT-shaped run still reaching the end, text is held up to their caps (8192
characters, `credentials.PEM_MAX_CHARS` / `JWT_MAX_CHARS`); a block or token longer than its
cap is not a match, in a stream as in a whole text. A tenant's custom pattern is assumed to
match at most HOLD_BACK_CHARS - 2 characters: a longer custom match split across pieces may
be missed. Text is scanned in steps of RELEASE_STEP_CHARS, so a stream of one-character
pieces costs a scan every 64 characters, not one per piece: outside those two credentials,
at most HOLD_BACK_CHARS + RELEASE_STEP_CHARS - 1 (363) characters are held at a time.

The released text keeps the last HOLD_BACK_CHARS characters as left context, so a value's
neighbours (is "4111..." glued to a longer number?) read the same as in the whole text.
The verdict and the redacted text are then those of `Scanner.scan` on the whole answer.

Actions: "redact" releases the text with each value replaced (`matches.redact`); "block"
stops at the first value: `blocked` says its kind and position, and nothing from it on is
released; "flag" releases the text unchanged and counts the values. `scanned_chars` is the
number of leading characters whose verdict is final: it equals `fed_chars` only after
`finish()`, or stays where a block stopped scanning.
"""

from __future__ import annotations

from typing import Literal

from guardrails.credentials import unfinished_long_credential
from guardrails.detectors import Scanner
from guardrails.matches import Match, redact

HOLD_BACK_CHARS = 300
RELEASE_STEP_CHARS = 64
Action = Literal["redact", "block", "flag"]


class StreamScanner:
    """Scan one answer's stream; one instance per answer."""

    def __init__(self, scanner: Scanner, action: Action) -> None:
        if action not in ("redact", "block", "flag"):
            raise ValueError(f"unknown action {action!r}: redact, block or flag")
        self.scanner = scanner
        self.action = action
        # The built-ins' longest bounded match plus the two characters a check reads past it.
        self.hold_back_chars = max(HOLD_BACK_CHARS, scanner.max_chars + 2)
        self._long = "credential" in {detector.kind for detector in scanner.detectors}
        self.fed_chars = 0
        self.scanned_chars = 0
        self.matches: list[Match] = []  # with positions in the whole answer
        self.blocked: Match | None = None
        self._buffer = ""  # left context (already released) + text held back
        self._context = 0  # how many of the buffer's first characters are context
        self._offset = 0  # the buffer's first character's position in the answer
        self._scanned_at = 0  # the buffer's length at the last scan

    @property
    def match_count(self) -> int:
        return len(self.matches)

    def feed(self, piece: str) -> str:
        """Take the next piece of the answer; return the text now safe to send (maybe "")."""
        self.fed_chars += len(piece)
        if self.blocked is not None or not piece:
            return ""
        self._buffer += piece
        pending = len(self._buffer) - self._context
        if pending <= self.hold_back_chars:
            return ""
        if len(self._buffer) - self._scanned_at < RELEASE_STEP_CHARS:
            return ""
        return self._release(final=False)

    def finish(self) -> str:
        """Take the end of the answer; return the rest of the text to send."""
        if self.blocked is not None:
            return ""
        return self._release(final=True)

    def _release(self, *, final: bool) -> str:
        buffer, context = self._buffer, self._context
        self._scanned_at = len(buffer)
        found = [match for match in self.scanner.scan(buffer) if match.start >= context]
        cut = len(buffer)
        if not final:
            cut -= self.hold_back_chars
            opener = unfinished_long_credential(buffer, context) if self._long else None
            if opener is not None:
                cut = min(cut, opener)
        final_matches = [match for match in found if match.start < cut]
        if final_matches:
            cut = max(cut, final_matches[-1].end)  # release a value whole, never half of it
        if cut <= context:
            return ""
        segment = buffer[context:cut]
        local = [Match(m.kind, m.label, m.start - context, m.end - context) for m in final_matches]
        absolute = self._offset + context
        self.matches.extend(
            Match(m.kind, m.label, m.start + absolute, m.end + absolute) for m in local
        )
        if self.action == "block" and local:
            first = self.matches[len(self.matches) - len(local)]
            self.blocked = first
            self.scanned_chars = self._offset + cut
            self._buffer = ""
            return segment[: local[0].start]
        self.scanned_chars = self._offset + cut
        keep_from = max(0, cut - self.hold_back_chars)
        self._buffer = buffer[keep_from:]
        self._offset += keep_from
        self._context = cut - keep_from
        self._scanned_at -= keep_from
        return redact(segment, local) if self.action == "redact" else segment
