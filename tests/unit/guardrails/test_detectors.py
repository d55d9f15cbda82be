"""The built-in detectors through `Scanner.scan`: what each kind finds and, as important,
what it leaves alone; redaction; overlaps; text around values in other scripts."""

from __future__ import annotations

import pytest

from guardrails.detectors import BUILTIN_KINDS, Scanner
from guardrails.matches import Match, redact

SCANNER = Scanner()
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
OPENAI_KEY = "sk-" + "T3BlbkFJ" * 6
ANTHROPIC_KEY = "sk-ant-api03-" + "Ab3_" * 23 + "AA"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nq0dZ9+8=\n-----END RSA PRIVATE KEY-----"


def found(text: str, scanner: Scanner = SCANNER) -> list[tuple[str, str, str]]:
    return [(m.kind, m.label, text[m.start : m.end]) for m in scanner.scan(text)]


def test_empty_text_has_nothing():
    assert SCANNER.scan("") == []


def test_matches_carry_kind_label_and_span_only():
    assert SCANNER.scan("mail a.b@example.com now") == [Match("email", "", 5, 20)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("write to jane.doe+tag@mail.example.co.uk.", "jane.doe+tag@mail.example.co.uk"),
        ("(ops@corp.io)", "ops@corp.io"),
    ],
)
def test_email_addresses(text, value):
    assert found(text) == [("email", "", value)]


@pytest.mark.parametrize("text", ["a@b", "user@localhost", ".dot@example.com", "a..b@example.com"])
def test_not_email_addresses(text):
    assert [kind for kind, _, _ in found(text)] == []


@pytest.mark.parametrize(
    "phone",
    [
        "(415) 555-2671",
        "415-555-2671",
        "415.555.2671",
        "1-800-555-0199",
        "+1 415 555 2671",
        "+44 20 7946 0958",
        "+49 1512 3456789",
        "+33 6 12 34 56 78",
        "+81 90-1234-5678",
    ],
)
def test_phone_numbers(phone):
    assert found(f"call {phone} today") == [("phone", "", phone)]


@pytest.mark.parametrize(
    "text",
    [
        "4155552671",  # a bare run of digits: an id or an amount, not a phone
        "2024-12-07 13:45:30",
        "+1 123 456 7890",  # no US area code starts with 1
        "415-5552-671",  # not grouped as US numbers are
        "v1.415.555.2671",
        "ts 1733538000",
    ],
)
def test_not_phone_numbers(text):
    assert found(text) == []


def test_a_bracket_around_a_phone_number_is_not_part_of_it():
    assert found("(415-555-2671)") == [("phone", "", "415-555-2671")]


def test_the_default_phone_region_reads_national_numbers():
    german = Scanner(["phone"], phone_region="DE")
    assert found("ruf 030 123456 an", german) == [("phone", "", "030 123456")]
    assert found("call (415) 555-2671", german) == []


@pytest.mark.parametrize(
    "card",
    [
        "4111111111111111",
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "5555555555554444",
        "2223 0031 2200 3222",
        "3782 822463 10005",
        "6011111111111117",
        "3530111333300000",
        "30569309025904",
        "6200000000000005",
    ],
)
def test_payment_cards(card):
    assert found(f"card {card}, thanks") == [("payment_card", "", card)]


@pytest.mark.parametrize(
    "text",
    [
        "4111111111111112",  # off by one: Luhn fails
        "4111 1111 1111 1112",
        "1234567812345670",  # Luhn-valid but no network issues it
        "4111 1111-1111 1111",  # mixed separators
        "41111111111111111111",  # 20 digits: runs on past any card
        "ORD4111111111111111",
        "4111111111111111.5",
    ],
)
def test_not_payment_cards(text):
    assert [kind for kind, _, _ in found(text)] == []


def test_a_card_followed_by_its_expiry_is_found():
    assert found("4111 1111 1111 1111 12/27") == [("payment_card", "", "4111 1111 1111 1111")]


@pytest.mark.parametrize(
    "iban",
    [
        "DE89370400440532013000",
        "DE89 3704 0044 0532 0130 00",
        "GB29 NWBK 6016 1331 9268 19",
        "FR1420041010050500013M02606",
        "NO9386011117947",
        "MT84MALT011000012345MTLCAST001S",
    ],
)
def test_ibans(iban):
    assert found(f"IBAN: {iban}.") == [("iban", "", iban)]


@pytest.mark.parametrize(
    "text",
    [
        "DE88370400440532013000",  # wrong check digits
        "DE89 3704 0044 0532 0130 01",
        "DE8937040044053201300",  # one character short
        "DE89 37040044 0532 0130 00",  # spaced in some places only
        "XDE89370400440532013000",
    ],
)
def test_not_ibans(text):
    assert found(text) == []


@pytest.mark.parametrize("ssn", ["123-45-6789", "123 45 6789", "899-99-9999"])
def test_social_security_numbers(ssn):
    assert found(f"SSN {ssn}") == [("us_ssn", "", ssn)]


@pytest.mark.parametrize(
    "text",
    [
        "000-12-3456",
        "666-12-3456",
        "900-12-3456",
        "123-00-4567",
        "123-45-0000",
        "123456789",  # bare digits: not matched (zip+4, ids)
        "123-45 6789",
        "1123-45-6789",
        "123-45-6789-0",
    ],
)
def test_not_social_security_numbers(text):
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("host 192.168.1.10.", "192.168.1.10"),
        ("from 8.8.8.8:53", "8.8.8.8"),
        ("at 2001:db8::1 now", "2001:db8::1"),
        ("[::1]:8080", "::1"),
        ("fe80:0000:0000:0000:0202:b3ff:fe1e:8329", "fe80:0000:0000:0000:0202:b3ff:fe1e:8329"),
        ("mapped ::ffff:192.0.2.1", "::ffff:192.0.2.1"),
    ],
)
def test_ip_addresses(text, address):
    assert found(text) == [("ip_address", "v6" if ":" in address else "v4", address)]


@pytest.mark.parametrize(
    "text",
    [
        "256.1.1.1",
        "1.2.3.4.5",
        "v1.2.3.4",
        "01.2.3.4",
        "12:30:45",
        "00:1A:2B:3C:4D:5E",
        "std::vector",
        "a :: b",
        "1:2:3:4:5:6:7:8:9",
    ],
)
def test_not_ip_addresses(text):
    assert found(text) == []


@pytest.mark.parametrize(
    ("value", "label"),
    [
        (OPENAI_KEY, "openai"),
        ("sk-proj-" + "aB3dE6gH9j" * 15, "openai"),
        (ANTHROPIC_KEY, "anthropic"),
        (AWS_KEY, "aws"),
        ("ASIA" + "Q2RST7UVWXYZ2345", "aws"),
        ("AIza" + "SyD-3x4mPl3_k3y0123456789abcdefghij", "google"),
        ("ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8", "github"),
        ("github_pat_" + "1" * 22 + "_" + "a" * 59, "github"),
        ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "slack"),
        (JWT, "jwt"),
        (PEM, "private_key"),
    ],
)
def test_credentials(value, label):
    assert found(f"use {value} here") == [("credential", label, value)]


@pytest.mark.parametrize(
    "text",
    [
        "pip install sk-learn",
        "see sk-assessment-2024-q1-planning-doc-v2",  # a slug: no capitals
        "sk-" + "Ab1" * 8,  # 24 characters: shorter than any key
        "sk-" + "x" * 40,  # a placeholder: no digit
        "task-" + "a1" * 20,
        "AKIAEXAMPLE",
        "AKIAIOSFODNN7EXAMPLE1",  # one character too many
        "ghp_" + "a1" * 10,
        "xoxb-test-token",
        "eyJhbGciOi.notajwt",
        "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END EC PRIVATE KEY-----",
    ],
)
def test_credential_look_alikes(text):
    assert found(text) == []


def test_redaction_replaces_each_value_with_its_kind():
    text = f"Mail a@example.com, card 4111111111111111, key {AWS_KEY}, ip 10.0.0.1."
    assert redact(text, SCANNER.scan(text)) == (
        "Mail [REDACTED:email], card [REDACTED:payment_card], key [REDACTED:credential], "
        "ip [REDACTED:ip_address]."
    )


def test_redaction_of_nothing_is_the_text():
    assert redact("plain text", []) == "plain text"


def test_redact_refuses_overlapping_matches():
    with pytest.raises(ValueError, match="overlap"):
        redact("abcdef", [Match("email", "", 0, 4), Match("phone", "", 2, 6)])


def test_overlapping_values_resolve_to_the_leftmost_then_longest():
    # An email address whose local part is a phone-shaped run: one value, the longer.
    assert found("415-555-2671@example.com") == [("email", "", "415-555-2671@example.com")]
    # An IBAN's digits never read as a card inside it.
    assert found("GB29 NWBK 6016 1331 9268 19") == [("iban", "", "GB29 NWBK 6016 1331 9268 19")]


def test_anthropic_keys_are_not_also_openai_keys():
    assert found(ANTHROPIC_KEY) == [("credential", "anthropic", ANTHROPIC_KEY)]


def test_values_among_other_scripts_have_character_positions():
    text = "Привет 😀 jane@example.com — カード 4111 1111 1111 1111。IBAN DE89370400440532013000"
    assert found(text) == [
        ("email", "", "jane@example.com"),
        ("payment_card", "", "4111 1111 1111 1111"),
        ("iban", "", "DE89370400440532013000"),
    ]
    assert redact(text, SCANNER.scan(text)) == (
        "Привет 😀 [REDACTED:email] — カード [REDACTED:payment_card]。IBAN [REDACTED:iban]"
    )


def test_only_the_kinds_asked_for_are_found():
    text = "a@example.com 4111111111111111"
    assert found(text, Scanner(["payment_card"])) == [("payment_card", "", "4111111111111111")]
    assert Scanner([]).scan(text) == []


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown detector kinds: credit_card"):
        Scanner(["email", "credit_card"])


def test_every_kind_has_a_stable_name():
    assert BUILTIN_KINDS == (
        "email", "phone", "payment_card", "iban", "us_ssn", "ip_address", "credential",
    )  # fmt: skip


def test_private_keys_and_jwts_past_their_caps_are_not_matched():
    line = "A" * 63 + "\n"
    within = "-----BEGIN PRIVATE KEY-----\n" + line * 120 + "-----END PRIVATE KEY-----"
    beyond = "-----BEGIN PRIVATE KEY-----\n" + line * 130 + "-----END PRIVATE KEY-----"
    assert (len(within), len(beyond)) == (7733, 8373)  # the cap is 8192
    assert found(within) == [("credential", "private_key", within)]
    assert found(beyond) == []
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJ" + "a" * 8200 + ".sig"
    assert found(jwt) == []


def test_a_private_key_block_is_the_last_begin_line_before_its_end_line():
    text = "-----BEGIN PRIVATE KEY-----\ntruncated\n" + PEM
    assert found(text) == [("credential", "private_key", PEM)]
