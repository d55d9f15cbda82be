"""The values every detector shares: a `Match` (what was found, never the text itself), a
`Detector` (a candidate pattern and the check that confirms a candidate), the byte-level
neighbour tests the checks use, and `redact`.

Detectors run on the text's UTF-8 bytes: every built-in pattern is ASCII, so a candidate's
bytes are its characters, and the scanner maps byte offsets back to character offsets once,
for the few matches that survive their check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Validate a candidate found at data[start:end]: the span to report (possibly shorter, e.g. a
# card number followed by its expiry), or None when it is not a real value.
Validator = Callable[[bytes, int, int], "tuple[int, int] | None"]

ALNUM = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
DIGITS = frozenset(b"0123456789")
TOKEN = ALNUM | frozenset(b"_-")  # the characters of API keys and JWT segments


@dataclass(frozen=True, slots=True)
class Match:
    """One value found: its kind (a stable name: it goes into records and the API), a label
    (the credential's vendor, the custom pattern's name; "" otherwise) and its character span
    in the scanned text. The matched text itself is never kept."""

    kind: str
    label: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Detector:
    """A candidate pattern (RE2 syntax, ASCII, found in one linear pass) and its confirming
    check. `max_chars` bounds what it can match: the stream's hold-back is built from it.

    `hint` is a short pattern every confirmed value contains (a key's prefix, "@" between
    two address characters): the scanner's first pass looks for the hints of all detectors
    at once, and hints without long counted repetitions keep that combined automaton small
    on any text (the full patterns together made it thrash on adversarial input).
    `whole_token`: a rejected candidate is a whole token no value can start inside, so the
    search resumes after it rather than at the next token inside it.
    """

    kind: str
    label: str
    pattern: str
    validate: Validator
    max_chars: int
    hint: str
    longest_match: bool = False
    whole_token: bool = False


def byte_at(data: bytes, index: int) -> int:
    """Return the byte at index, or 0 outside the text (NUL is in no character class here, so
    the text's edges count as boundaries)."""
    return data[index] if 0 <= index < len(data) else 0


def glued(data: bytes, start: int, end: int, chars: frozenset[int]) -> bool:
    """Say whether the span touches one of `chars` on either side: a value inside a longer
    token (an order id, a version string, a longer key) is not that value."""
    return byte_at(data, start - 1) in chars or byte_at(data, end) in chars


def continues_number(data: bytes, start: int, end: int) -> bool:
    """Say whether digits run on past the span through a '.' or '-' (1.2.3.4.5, 123-45-6789-0)
    or into it from before: the span is then part of a longer number, not a value of its own."""
    before = byte_at(data, start - 1) in b".-" and byte_at(data, start - 2) in DIGITS
    after = byte_at(data, end) in b".-" and byte_at(data, end + 1) in DIGITS
    return before or after


REDACTION_TOKEN = "[REDACTED:{kind}]"


def redact(text: str, matches: Sequence[Match]) -> str:
    """Return text with each match replaced by `[REDACTED:<kind>]` (e.g. `[REDACTED:email]`;
    credentials say `credential`, not which vendor's, so a redacted prompt tells the model
    nothing it can use). Matches must not overlap: `Scanner.scan` never returns overlaps."""
    parts: list[str] = []
    position = 0
    for match in sorted(matches, key=lambda m: m.start):
        if match.start < position:
            raise ValueError("matches overlap: redact takes Scanner.scan's non-overlapping list")
        parts.append(text[position : match.start])
        parts.append(REDACTION_TOKEN.format(kind=match.kind))
        position = match.end
    parts.append(text[position:])
    return "".join(parts)
