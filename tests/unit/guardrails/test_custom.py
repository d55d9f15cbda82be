"""A tenant's custom patterns and words: what they match, and every refusal's message."""

from __future__ import annotations

import pytest

from guardrails.custom import (
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    MAX_WORD_CHARS,
    MAX_WORDS,
    PatternRejected,
    compile_custom,
)
from guardrails.detectors import Scanner
from guardrails.matches import Match, redact


def custom_only(patterns=(), words=()) -> Scanner:
    return Scanner((), custom=compile_custom(patterns, words))


def test_patterns_match_with_their_label():
    scanner = custom_only([r"PRJ-[0-9]{4}", r"(?i)codename \w+"])
    text = "see PRJ-1234 and Codename Falcon"
    assert scanner.scan(text) == [
        Match("custom", "pattern-1", 4, 12),
        Match("custom", "pattern-2", 17, 32),
    ]
    assert redact(text, scanner.scan(text)) == "see [REDACTED:custom] and [REDACTED:custom]"


def test_words_match_whole_and_ignore_case():
    scanner = custom_only(words=["falcon", "Project Nightjar", "café"])
    text = "FALCON, falconry, project nightjar; Café and cafés"
    assert [(m.label, text[m.start : m.end]) for m in scanner.scan(text)] == [
        ("words", "FALCON"),
        ("words", "project nightjar"),
        ("words", "Café"),
    ]


def test_the_longest_word_wins_where_two_start():
    scanner = custom_only(words=["acme", "acme corp"])
    assert [m.end for m in scanner.scan("at ACME Corp today")] == [12]


def test_custom_and_builtin_matches_are_resolved_together():
    scanner = Scanner(["email"], custom=compile_custom([r"[a-z]+@example\.com"]))
    # Same span: the built-in is listed first and wins; the kind is email.
    assert scanner.scan("x jane@example.com") == [Match("email", "", 2, 18)]


@pytest.mark.parametrize(
    ("pattern", "text", "count"),
    [
        ("(a+)+$", "a" * 100_000 + "!", 0),
        ("(a+)+$", "a" * 100_000, 1),
        ("(x|x)*y", "x" * 100_000, 0),
        ("(x|x)*y", "x" * 100_000 + "y", 1),
        ("(.*a){20}", "a" * 100_000, 1),
        ("(\\w+\\s?)+$", "word " * 20_000 + "!", 0),
    ],
    ids=[
        "nested-plus",
        "nested-plus-match",
        "alternation",
        "alternation-match",
        "dot-star",
        "words",
    ],
)
def test_pathological_patterns_finish_on_100_kb_with_the_right_answer(pattern, text, count):
    # A backtracking engine takes exponential time on these; RE2 is linear (bench has times).
    matches = custom_only([pattern]).scan(text)
    assert len(matches) == count
    if count:
        assert (matches[0].start, matches[0].end) == (0, len(text))


def refusal(patterns=(), words=()) -> str:
    with pytest.raises(PatternRejected) as raised:
        compile_custom(patterns, words)
    assert isinstance(raised.value, ValueError)
    return str(raised.value)


def test_a_pattern_re2_rejects_is_named_with_re2s_reason():
    assert refusal(["ok", "(unclosed"]) == "pattern 2: RE2 cannot compile it: missing ): (unclosed"
    assert refusal([r"(a)\1"]) == "pattern 1: RE2 cannot compile it: invalid escape sequence: \\1"
    assert refusal(["(?<=a)b"]) == "pattern 1: RE2 cannot compile it: invalid perl operator: (?<="


def test_a_pattern_over_the_length_limit_is_refused():
    assert refusal(["a" * (MAX_PATTERN_CHARS + 1)]) == (
        f"pattern 1: is {MAX_PATTERN_CHARS + 1} characters long, at most {MAX_PATTERN_CHARS}"
    )


def test_too_many_patterns_or_words_are_refused():
    assert refusal(["a"] * (MAX_PATTERNS + 1)) == (
        f"patterns: {MAX_PATTERNS + 1} given, at most {MAX_PATTERNS}"
    )
    assert refusal(words=["w"] * (MAX_WORDS + 1)) == (
        f"words: {MAX_WORDS + 1} given, at most {MAX_WORDS}"
    )


def test_a_pattern_whose_program_is_too_big_is_refused():
    # 121 characters, 11,000 instructions: within the length limit, over the size limit.
    assert refusal(["[a-z]{1000}" * 11]) == (
        "pattern 1: compiles to 11004 RE2 instructions, at most 10000"
    )


def test_a_pattern_over_re2s_memory_budget_is_refused():
    assert refusal([r"\p{L}{1000}"]) == (
        "pattern 1: RE2 cannot compile it: pattern too large - compile failed"
    )


def test_a_pattern_matching_the_empty_string_is_refused():
    assert refusal(["x*"]) == "pattern 1: matches the empty string, so it would match everywhere"
    assert refusal([""]) == "pattern 1: is empty"


def test_bad_words_are_refused():
    assert refusal(words=["fine", "  "]) == "word 2: is empty"
    assert refusal(words=["w" * (MAX_WORD_CHARS + 1)]) == (
        f"word 1: is {MAX_WORD_CHARS + 1} characters long, at most {MAX_WORD_CHARS}"
    )


def test_words_are_literal_text_not_patterns():
    scanner = custom_only(words=["a.c", "(x"])
    assert [m.start for m in scanner.scan("abc a.c (x")] == [4, 8]


def test_patterns_and_spans_are_in_characters_of_any_script():
    scanner = custom_only(["é+", r"\p{Greek}+", "(?i)straße"])
    text = "xx ééé αβγ STRASSE Straße 😀é"
    assert [(m.label, text[m.start : m.end]) for m in scanner.scan(text)] == [
        ("pattern-1", "ééé"),
        ("pattern-2", "αβγ"),
        ("pattern-3", "Straße"),
        ("pattern-1", "é"),
    ]
