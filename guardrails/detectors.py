"""Built-in detectors and the one scanning entry point, `Scanner`.

Speed is the design (issue 43: every built-in on a 4 kB prompt within 0.2 ms of CPU): one RE2
set pass over the text looks for every detector's hint at once (a short pattern each value
contains), so a text without candidates costs that one linear pass; only the detectors whose
hint occurs then run their full patterns, and only their candidates pay for a check (Luhn,
mod-97, `phonenumbers`, `ipaddress`).
Every pattern is RE2 (linear time, no backtracking); Python's `re` never scans text here.

Kinds (stable names, they go into records and the API): email, phone, payment_card, iban,
us_ssn, ip_address, credential (label: the vendor) and custom (label: the tenant's pattern).
Choices a reader should know:
- phone: a leading `+` and 7 to 15 digits, or a national number of the default region
  ("US" unless the policy says otherwise) laid out the way that region's example numbers are
  ((415) 555-2671, 415-555-2671, 1-800-555-0199); `phonenumbers` must call it valid. A bare
  run of digits without `+` is not a phone (in prose it is an id, a timestamp or an amount),
  nor a national number laid out unlike the region's own formats.
- us_ssn: AAA-GG-SSSS with dashes or with spaces. A bare 9-digit run is not matched (zip+4
  codes, order and account numbers share the shape), nor one mixing separators.
- iban: upper-case, written whole or in groups of four separated by single spaces.
- payment_card: 13 to 19 digits written whole, in groups of four (the last may be shorter)
  or Amex/Diners' 4-6-5 and 4-6-4, with one kind of separator. Short groups after a card
  (an expiry) are left out of it, except that a 4-4-4-4-3 run of a brand issuing 19 digits
  is judged whole. Digits glued to letters or other digits are not a card. A random 16-digit
  reference passes Luhn and a brand's range about 3 times in 100 (the bench measures it):
  no detector can tell those apart.
- email: ASCII addresses (local part up to 64 characters, RFC 5321).
- ip_address (label v4 or v6): whatever `ipaddress` accepts, standing alone (not inside a
  version string like v1.2.3.4 or a longer dotted number).
- A candidate that fails its check does not hide a value starting inside it: the search goes
  on from the next token. Overlaps resolve to the leftmost, then the longest.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any, cast

import re2
from re2 import _re2  # type: ignore[attr-defined]  # the binding under re2's wrapper

from guardrails.checks import IBAN_LENGTHS, card_brand, iban_valid, luhn_valid, ssn_valid
from guardrails.credentials import CREDENTIAL_DETECTORS
from guardrails.custom import CustomRules
from guardrails.matches import ALNUM, DIGITS, Detector, Match, byte_at, continues_number, glued
from guardrails.phones import PhoneCheck

BUILTIN_KINDS = ("email", "phone", "payment_card", "iban", "us_ssn", "ip_address", "credential")
DEFAULT_PHONE_REGION = "US"
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
EMAIL_LOCAL = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")


def _email(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if byte_at(data, start - 1) in EMAIL_LOCAL or byte_at(data, end) in ALNUM:
        return None  # a local part over 64 characters, or a top-level domain that runs on
    at = data.index(b"@", start)
    local, domain = data[start:at], data[at + 1 : end]
    if local.startswith(b".") or local.endswith(b".") or b".." in local or b".." in domain:
        return None
    if any(label.startswith(b"-") or label.endswith(b"-") for label in domain.split(b".")):
        return None
    return start, end


def _card(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    before = byte_at(data, start - 1)
    if before in ALNUM or before in b"+$" or continues_number(data, start, start):
        return None  # inside a longer number, a phone number or an amount
    if before in b" -" and before in data[start:end] and _card_group_before(data, start - 1):
        return None  # the tail of a longer run grouped like a card (whose whole was not one)
    if len({byte for byte in data[start:end] if byte not in DIGITS}) > 1:
        return None  # mixed separators
    groups = data[start:end].replace(b"-", b" ").split(b" ")
    # The longest prefix of whole groups that is a card: "4111 1111 1111 1111 12/27" holds
    # one. But a run laid out as a 19-digit card (4-4-4-4-3) of a brand that issues 19 digits
    # is judged whole: read as its first 16 it would pass Luhn one time in ten.
    sizes = [len(group) for group in groups]
    whole = b"".join(groups).decode()
    judge_whole = sizes == [4, 4, 4, 4, 3] and card_brand(whole) is not None
    for count in range(len(groups), len(groups) - 1 if judge_whole else 0, -1):
        sizes = [len(group) for group in groups[:count]]
        digits = b"".join(groups[:count]).decode()
        if len(digits) < 13:
            break
        span_end = start + sum(sizes) + count - 1
        if count == len(groups) and (
            byte_at(data, span_end) in ALNUM or continues_number(data, span_end, span_end)
        ):
            return None  # the digits run on: an id or a longer number, not a card
        if _card_grouping(sizes) and card_brand(digits) and luhn_valid(digits):
            return start, span_end
    return None


def _card_group_before(data: bytes, separator_at: int) -> bool:
    """Say whether groups of four digits (or capitals and digits, an IBAN's), joined by the
    separator at separator_at, run up to it from the start of a token (like "4658 " before
    "3805 4587 ...", or "SK71 " before "4569 4842 ...")."""
    separator, end = data[separator_at], separator_at
    while end >= 4 and _group_of_four(data[end - 4 : end]):
        before = byte_at(data, end - 5)
        if before == separator and byte_at(data, end - 6) in DIGITS:
            end -= 5
            continue
        # The run starts the token ("=LI96 3814 ...") unless it continues a number
        # ("70652-9701 3608 ...": a zip code, then a card).
        return before not in ALNUM and not (before in b"-./:," and byte_at(data, end - 6) in ALNUM)
    return False


def _group_of_four(group: bytes) -> bool:
    return group.isdigit() or (group.isalnum() and group.isupper() and group[-1:].isdigit())


def _card_grouping(sizes: list[int]) -> bool:
    if len(sizes) == 1:
        return True
    if sizes in ([4, 6, 5], [4, 6, 4]):
        return True
    return all(size == 4 for size in sizes[:-1]) and 1 <= sizes[-1] <= 4


def _iban(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if byte_at(data, start - 1) in ALNUM:
        return None
    length = IBAN_LENGTHS.get(data[start : start + 2].decode())
    if length is None:
        return None
    # Walk `length` characters; spaces are allowed only between groups of four.
    position, taken = start, 0
    while taken < length and position < end:
        char = data[position]
        if char == 32:
            if taken % 4 or byte_at(data, position + 1) == 32:
                return None
        else:
            taken += 1
        position += 1
    if taken < length or byte_at(data, position) in ALNUM:
        return None
    spaced = position - start > length
    if spaced and (position - start - length) != (length - 1) // 4:
        return None  # some groups spaced and some not
    compact = data[start:position].replace(b" ", b"").decode()
    return (start, position) if iban_valid(compact) else None


def _ssn(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if glued(data, start, end, ALNUM) or continues_number(data, start, end):
        return None
    text = data[start:end].decode()
    return (start, end) if ssn_valid(text[0:3], text[4:6], text[7:11]) else None


def _ipv4(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if glued(data, start, end, ALNUM | frozenset(b".")) and not (
        # a sentence's full stop after an address is not part of it
        byte_at(data, end) == 46
        and byte_at(data, end + 1) not in ALNUM
        and byte_at(data, start - 1) not in ALNUM | frozenset(b".")
    ):
        return None
    try:
        ipaddress.IPv4Address(data[start:end].decode())
    except ValueError:
        return None
    return start, end


def _ipv6(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if glued(data, start, end, ALNUM | frozenset(b":")):
        return None
    if not any(byte in b"0123456789abcdefABCDEF" for byte in data[start:end]):
        return None  # a bare "::" is punctuation (C++, Ruby), not an address
    try:
        ipaddress.IPv6Address(data[start:end].decode())
    except ValueError:
        return None
    return start, end


# 13 to 19 digits written whole, in groups of four (two more short groups may follow: an
# expiry, a code) or as 4-6-5 / 4-6-4, with one kind of separator.
_CARD = "|".join(
    (
        "[0-9]{13,19}",
        *(
            rf"[0-9]{{4}}(?:{sep}[0-9]{{4}}){{2}}{sep}[0-9]{{1,4}}(?:{sep}[0-9]{{1,4}}){{0,2}}"
            rf"|[0-9]{{4}}{sep}[0-9]{{6}}{sep}[0-9]{{4,5}}"
            for sep in (" ", "-")
        ),
    )
)
_H = "[0-9A-Fa-f]{1,4}"
_V4 = r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}"


def pii_detectors(phone_region: str) -> tuple[Detector, ...]:
    """Return the personal-data detectors, the phone one for numbers without `+` in
    `phone_region` (an ISO 3166 code such as "US")."""
    phones = PhoneCheck(phone_region)
    ssn = r"[0-9]{3}(?:-[0-9]{2}-| [0-9]{2} )[0-9]{4}"
    return (
        Detector(
            "email",
            "",
            r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,180}[A-Za-z0-9])?"
            r"\.[A-Za-z]{2,24}",
            _email,
            272,
            hint=r"[A-Za-z0-9._%+-]@[A-Za-z0-9]",
        ),
        # Every card layout starts with 4-4-4 digits or 4-6, separators aside.
        Detector(
            "payment_card",
            "",
            _CARD,
            _card,
            34,
            hint="[0-9]{4}[ -]?[0-9]{4}[ -]?[0-9]{4}|[0-9]{4}[ -][0-9]{6}[ -]",
        ),
        # An IBAN written whole or in groups of four holds its first group after the check.
        Detector(
            "iban",
            "",
            r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}",
            _iban,
            64,
            hint="[A-Z]{2}[0-9]{2} ?[A-Z0-9]{4}",
        ),
        Detector("us_ssn", "", ssn, _ssn, 11, hint=ssn),
        Detector("phone", "", phones.pattern, phones, phones.max_chars, hint=phones.hint),
        Detector("ip_address", "v4", _V4, _ipv4, 15, hint=r"[0-9]\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]"),
        Detector(
            "ip_address",
            "v6",
            # Eight groups, or fewer around one "::", optionally ending in an IPv4 address:
            # times (12:30:45) and MAC addresses are never candidates.
            rf"(?:{_H}:){{7}}{_H}|(?:{_H}:){{6}}{_V4}"
            rf"|(?:{_H}(?::{_H}){{0,6}})?::(?:{_H}(?::{_H}){{0,6}})?(?::?{_V4})?",
            _ipv6,
            90,  # the candidate; an address is at most 45
            hint=f"::|(?:{_H}:){{6}}",  # "::", or at least six groups
            longest_match=True,
            whole_token=True,
        ),
    )


class Scanner:
    """Find the built-in kinds asked for, and a tenant's custom patterns, in a text.

    Build one per policy and reuse it: construction compiles the patterns (milliseconds),
    `scan` is the cheap part. Safe to share between threads (RE2 objects are).
    """

    def __init__(
        self,
        kinds: Iterable[str] = BUILTIN_KINDS,
        *,
        custom: CustomRules | None = None,
        phone_region: str = DEFAULT_PHONE_REGION,
    ) -> None:
        wanted = tuple(kinds)
        unknown = sorted(set(wanted) - set(BUILTIN_KINDS))
        if unknown:
            raise ValueError(f"unknown detector kinds: {', '.join(unknown)}")
        every = pii_detectors(phone_region) + CREDENTIAL_DETECTORS
        self.detectors = tuple(d for d in every if d.kind in wanted)
        self.custom = custom
        self._compiled = tuple(_raw(_compile(detector)) for detector in self.detectors)
        self._set = re2.Set.SearchSet(_options(longest=False))
        for detector in self.detectors:
            self._set.Add(detector.hint)
        if self.detectors:
            self._set.Compile()
        # What the stream must hold back: the longest match any bounded detector can make.
        self.max_chars = max((d.max_chars for d in self.detectors if d.max_chars < 4096), default=0)

    def scan(self, text: str) -> list[Match]:
        """Return the values in text, ordered by start and not overlapping: where two
        overlap, the leftmost wins, then the longest, then the detector listed first."""
        data = text.encode("utf-8")
        found: list[tuple[int, int, int, str, str]] = []
        present = cast(
            "list[int] | None", self._set.Match(data) if self.detectors and data else None
        )
        for index in present or ():
            detector, compiled = self.detectors[index], self._compiled[index]
            position, size = 0, len(data)
            while (candidate := compiled.Match(_UNANCHORED, data, position, size)[0])[0] >= 0:
                span = detector.validate(data, candidate[0], candidate[1])
                if span is not None:
                    found.append((span[0], span[0] - span[1], index, detector.kind, detector.label))
                    position = span[1]
                elif detector.whole_token:
                    position = max(candidate[1], candidate[0] + 1)
                else:
                    position = _next_token(data, candidate[0])
        if self.custom is not None:
            for start, end, order, label in self.custom.find(data):
                found.append((start, -(end - start), len(self.detectors) + order, "custom", label))
        return _to_characters(text, data, _resolve(found))


def _options(*, longest: bool) -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.longest_match = longest
    return options


def _compile(detector: Detector) -> re2._Regexp[bytes]:
    return re2.compile(detector.pattern.encode(), _options(longest=detector.longest_match))


def _next_token(data: bytes, start: int) -> int:
    """Return where the next token after start begins: a rejected candidate (a timestamp
    before a card, "05 (201" before a phone) must not hide a value that starts inside it."""
    position, size = start + 1, len(data)
    while position < size and data[position - 1] in ALNUM:
        position += 1
    return position


def _raw(compiled: re2._Regexp[bytes]) -> Any:
    """Return the RE2 object under re2's wrapper: its Match takes a start position and returns
    spans, without the wrapper's generator and match object (a third of a candidate's cost)."""
    return compiled._regexp  # type: ignore[attr-defined]


def _resolve(found: list[tuple[int, int, int, str, str]]) -> list[tuple[int, int, str, str]]:
    chosen: list[tuple[int, int, str, str]] = []
    reach = 0
    for start, negative_length, _order, kind, label in sorted(found):
        if start >= reach:
            chosen.append((start, start - negative_length, kind, label))
            reach = start - negative_length
    return chosen


def _to_characters(text: str, data: bytes, spans: list[tuple[int, int, str, str]]) -> list[Match]:
    if len(data) == len(text):  # ASCII: bytes are characters
        return [Match(kind, label, start, end) for start, end, kind, label in spans]
    offsets = sorted({offset for span in spans for offset in span[:2]})
    characters: dict[int, int] = {}
    previous_byte = previous_char = 0
    for offset in offsets:
        previous_char += len(data[previous_byte:offset].decode("utf-8"))
        characters[offset] = previous_char
        previous_byte = offset
    return [Match(kind, label, characters[s], characters[e]) for s, e, kind, label in spans]
