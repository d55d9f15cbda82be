"""A tenant's own detectors: RE2 patterns and word lists, compiled once, refused with a clear
reason when they could cost too much.

RE2 runs any accepted pattern in time linear in the text (no backtracking: `(a+)+$` is as
cheap as `a+`), so what a tenant can make expensive is the compiled program's size (memory,
and the per-byte work of a huge automaton). Hence limits on the number and length of patterns,
RE2's own memory budget (`max_mem`) and a cap on the program size it reports.

Matches are reported as kind `custom` with the label `pattern-<n>` (n counts from 1 in the
order given) or `words`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import re2

from guardrails.matches import byte_at

MAX_PATTERNS = 20
MAX_PATTERN_CHARS = 500
MAX_WORDS = 1000
MAX_WORD_CHARS = 100
MAX_PROGRAM_SIZE = 10_000  # RE2 instructions; a pattern like [a-z]{200} uses about 400
MAX_MEM_BYTES = 4 << 20  # what RE2 may allocate for one pattern (its default is 8 MiB)
WORDS_LABEL = "words"


class PatternRejected(ValueError):
    """A custom pattern or word cannot be used; the message names which one and why."""

    def __init__(self, which: str, reason: str) -> None:
        super().__init__(f"{which}: {reason}")
        self.which = which
        self.reason = reason


@dataclass(frozen=True)
class CustomRules:
    """Compiled tenant patterns (`compile_custom` builds them)."""

    patterns: tuple[tuple[str, re2._Regexp[bytes]], ...]
    words: re2._Regexp[bytes] | None

    def find(self, data: bytes) -> Iterator[tuple[int, int, int, str]]:
        """Yield (start, end, order, label) byte spans of every non-empty match in UTF-8 data:
        each pattern's leftmost matches, then whole-word matches of the word list."""
        for order, (label, compiled) in enumerate(self.patterns):
            for found in compiled.finditer(data):
                if found.end() > found.start():
                    yield found.start(), found.end(), order, label
        if self.words is not None:
            position = 0
            while (match := self.words.search(data, position)) is not None:
                start, end = match.start(), match.end()
                if _word_edge(data, start, before=True) and _word_edge(data, end, before=False):
                    yield start, end, len(self.patterns), WORDS_LABEL
                    position = end
                else:
                    position = _next_character(data, start)


def compile_custom(patterns: Sequence[str] = (), words: Sequence[str] = ()) -> CustomRules:
    """Compile a tenant's patterns (RE2 syntax) and words (matched whole, ignoring case), or
    raise PatternRejected naming the first one that is refused and why."""
    if len(patterns) > MAX_PATTERNS:
        raise PatternRejected("patterns", f"{len(patterns)} given, at most {MAX_PATTERNS}")
    if len(words) > MAX_WORDS:
        raise PatternRejected("words", f"{len(words)} given, at most {MAX_WORDS}")
    compiled = tuple(
        (f"pattern-{number}", _compile_pattern(f"pattern {number}", pattern))
        for number, pattern in enumerate(patterns, start=1)
    )
    return CustomRules(compiled, _compile_words(words) if words else None)


def _options(*, longest: bool = False, case_sensitive: bool = True) -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_MEM_BYTES
    options.log_errors = False
    options.longest_match = longest
    options.case_sensitive = case_sensitive
    # Only a match's span is used: without captures RE2 never needs its slower submatch
    # engines, so `(.*a){20}` runs on its DFA like any other pattern.
    options.never_capture = True
    return options


def _compile_pattern(which: str, pattern: str) -> re2._Regexp[bytes]:
    if not pattern:
        raise PatternRejected(which, "is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRejected(
            which, f"is {len(pattern)} characters long, at most {MAX_PATTERN_CHARS}"
        )
    try:
        compiled = re2.compile(pattern.encode("utf-8"), _options())
    except re2.error as error:
        raise PatternRejected(which, f"RE2 cannot compile it: {_reason(error)}") from None
    _check_size(which, compiled)
    if compiled.search(b"") is not None:
        raise PatternRejected(which, "matches the empty string, so it would match everywhere")
    return compiled


def _compile_words(words: Sequence[str]) -> re2._Regexp[bytes]:
    escaped: list[str] = []
    for number, word in enumerate(words, start=1):
        stripped = word.strip()
        if not stripped:
            raise PatternRejected(f"word {number}", "is empty")
        if len(stripped) > MAX_WORD_CHARS:
            raise PatternRejected(
                f"word {number}", f"is {len(stripped)} characters long, at most {MAX_WORD_CHARS}"
            )
        escaped.append(re2.escape(stripped))
    # Longest match: of "foo" and "foo bar", the longer wins where both start.
    pattern = "|".join(sorted(set(escaped), key=len, reverse=True))
    try:
        options = _options(longest=True, case_sensitive=False)
        compiled = re2.compile(pattern.encode("utf-8"), options)
    except re2.error as error:
        raise PatternRejected("words", f"RE2 cannot compile them: {_reason(error)}") from None
    _check_size("words", compiled)
    return compiled


def _reason(error: re2.error) -> str:
    reason = error.args[0] if error.args else ""
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


def _check_size(which: str, compiled: re2._Regexp[bytes]) -> None:
    size = compiled.programsize
    if size > MAX_PROGRAM_SIZE:
        raise PatternRejected(
            which, f"compiles to {size} RE2 instructions, at most {MAX_PROGRAM_SIZE}"
        )


def _word_edge(data: bytes, index: int, *, before: bool) -> bool:
    """Say whether the character on one side of index is not a letter, digit or underscore
    (any script's: "café" does not match inside "cafés")."""
    if before:
        lead = index - 1
        while lead > 0 and 0x80 <= data[lead] < 0xC0:  # back to the character's first byte
            lead -= 1
        char = data[lead:index].decode("utf-8", "replace") if index > 0 else ""
    else:
        lead = index + 1
        while lead < len(data) and 0x80 <= data[lead] < 0xC0:
            lead += 1
        char = data[index:lead].decode("utf-8", "replace") if index < len(data) else ""
    return not char or not (char.isalnum() or char == "_")


def _next_character(data: bytes, index: int) -> int:
    index += 1
    while 0x80 <= byte_at(data, index) < 0xC0:
        index += 1
    return index
