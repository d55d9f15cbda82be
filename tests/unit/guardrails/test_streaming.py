"""The stream scanner gives the verdict and redacted text of a scan of the whole answer, however
the answer is cut into pieces, and never counts text as scanned before it was."""

from __future__ import annotations

import pytest

from guardrails.custom import compile_custom
from guardrails.detectors import Scanner
from guardrails.matches import Match, redact
from guardrails.streaming import HOLD_BACK_CHARS, RELEASE_STEP_CHARS, StreamScanner

SCANNER = Scanner(custom=compile_custom([r"PRJ-[0-9]{4}"], ["falcon"]))
LONG_JWT = "eyJhbGciOiJSUzI1NiJ9.eyJ" + "c3ViIjoiMTIzNDU2Nzg5MCJ9" * 18 + "." + "c2lnbmF0dXJl" * 10
LONG_PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    + "\n".join("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC" + str(i) for i in range(10))
    + "\n-----END PRIVATE KEY-----"
)
VALUES = (
    "jane.doe@example.com",
    "(415) 555-2671",
    "+44 20 7946 0958",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "123-45-6789",
    "192.168.1.10",
    "2001:db8::1",
    "sk-proj-" + "aB3dE6gH9j" * 15,
    "AKIAIOSFODNN7EXAMPLE",
    "PRJ-1234",
    "Falcon",
    LONG_JWT,
    LONG_PEM,
)
FILLER = "The report went out on 2024-12-07 at 13:45:30, version 3.10.12, for $1,299.99. "


def answer() -> tuple[str, list[tuple[int, int]]]:
    """Return prose with every value planted, and each value's span."""
    parts, spans, position = [], [], 0
    for index, value in enumerate(VALUES):
        lead = FILLER[: 20 + 13 * index % 60] + "é "
        parts.append(lead)
        position += len(lead)
        spans.append((position, position + len(value)))
        parts.append(value + ", ")
        position += len(value) + 2
    parts.append(" " + FILLER)
    return "".join(parts), spans


TEXT, SPANS = answer()
WHOLE = SCANNER.scan(TEXT)


def stream(pieces: list[str], action: str) -> tuple[str, StreamScanner]:
    streamer = StreamScanner(SCANNER, action)  # type: ignore[arg-type]
    released = "".join(streamer.feed(piece) for piece in pieces) + streamer.finish()
    return released, streamer


def test_the_whole_answer_has_every_planted_value():
    assert [(m.start, m.end) for m in WHOLE] == SPANS
    assert len(TEXT) > 4 * HOLD_BACK_CHARS


@pytest.mark.parametrize("action", ["redact", "flag", "block"])
def test_one_character_pieces_give_the_whole_texts_verdict(action):
    released, streamer = stream(list(TEXT), action)
    check(action, released, streamer)


@pytest.mark.parametrize("action", ["redact", "flag", "block"])
@pytest.mark.parametrize("index", range(len(VALUES)))
def test_every_value_split_at_every_position_gives_the_whole_texts_verdict(action, index):
    start, end = SPANS[index]
    for cut in range(start, end + 1):
        released, streamer = stream([TEXT[:cut], TEXT[cut:]], action)
        check(action, released, streamer)


@pytest.mark.parametrize("size", [2, 3, 7, 64, 299, 300, 301, 1000])
def test_pieces_of_any_size_give_the_whole_texts_verdict(size):
    pieces = [TEXT[i : i + size] for i in range(0, len(TEXT), size)]
    for action in ("redact", "flag", "block"):
        released, streamer = stream(pieces, action)
        check(action, released, streamer)


def check(action: str, released: str, streamer: StreamScanner) -> None:
    assert streamer.fed_chars == len(TEXT)
    if action == "redact":
        assert released == redact(TEXT, WHOLE)
        assert streamer.matches == WHOLE
        assert streamer.scanned_chars == len(TEXT)
    elif action == "flag":
        assert released == TEXT
        assert streamer.match_count == len(VALUES)
        assert streamer.scanned_chars == len(TEXT)
    else:
        assert streamer.blocked == WHOLE[0] == Match("email", "", SPANS[0][0], SPANS[0][1])
        assert released == TEXT[: SPANS[0][0]]
        assert SPANS[0][1] <= streamer.scanned_chars < len(TEXT)


def test_text_is_held_back_only_the_window():
    prose = "plain words and nothing else " * 100
    streamer = StreamScanner(SCANNER, "redact")
    released = "".join(streamer.feed(prose[i : i + 5]) for i in range(0, len(prose), 5))
    held = len(prose) - len(released)
    assert HOLD_BACK_CHARS <= held < HOLD_BACK_CHARS + RELEASE_STEP_CHARS + 5
    assert streamer.scanned_chars == len(released) < streamer.fed_chars == len(prose)
    assert released + streamer.finish() == prose
    assert streamer.scanned_chars == len(prose)


def test_an_unfinished_private_key_is_held_until_its_end_line():
    streamer = StreamScanner(SCANNER, "redact")
    head = "Here it is:\n" + LONG_PEM[: len(LONG_PEM) - 10]
    released = streamer.feed(head)
    assert released == "Here it is:\n"
    assert streamer.feed(LONG_PEM[-10:] + " done" + " " * HOLD_BACK_CHARS) == (
        "[REDACTED:credential] done"
    )


def test_a_block_stops_the_stream():
    streamer = StreamScanner(SCANNER, "block")
    first = streamer.feed("hello jane@example.com " + "x " * HOLD_BACK_CHARS)
    assert first == "hello "
    assert streamer.blocked == Match("email", "", 6, 22)
    scanned = streamer.scanned_chars
    assert streamer.feed("more text") == ""
    assert streamer.finish() == ""
    assert streamer.scanned_chars == scanned
    assert streamer.fed_chars == 23 + 2 * HOLD_BACK_CHARS + 9


def test_an_empty_stream_and_empty_pieces():
    streamer = StreamScanner(SCANNER, "redact")
    assert streamer.feed("") == ""
    assert streamer.finish() == ""
    assert (streamer.fed_chars, streamer.scanned_chars, streamer.match_count) == (0, 0, 0)


def test_an_unknown_action_is_refused():
    with pytest.raises(ValueError, match="unknown action 'drop': redact, block or flag"):
        StreamScanner(SCANNER, "drop")
