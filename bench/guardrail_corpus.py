"""A seeded corpus for the guardrail detectors (bench/guardrail_detectors.py): ordinary prose
with realistic distractors (dates, times, prices, versions, order and tracking ids, UUIDs,
hashes, timestamps, zip codes), and planted values of every kind, valid ones generated the
way their issuers make them (Luhn check digits per card brand, mod-97 check digits per IBAN
country, SSA-valid SSNs, phone numbers that phonenumbers says are valid in a dozen
countries) and invalid twins (a changed digit, a wrong check, a forbidden SSN area, an octet
over 255, credential look-alikes) that must not match."""

from __future__ import annotations

import ipaddress
import random
import string
from dataclasses import dataclass

import phonenumbers

from guardrails.checks import IBAN_LENGTHS, luhn_valid

WORDS = [
    "the",
    "report",
    "was",
    "shipped",
    "to",
    "our",
    "team",
    "after",
    "review",
    "and",
    "the",
    "customer",
    "asked",
    "whether",
    "we",
    "could",
    "move",
    "the",
    "meeting",
    "to",
    "next",
    "week",
    "because",
    "their",
    "budget",
    "for",
    "this",
    "quarter",
    "is",
    "already",
    "spent",
    "on",
    "infrastructure",
    "upgrades",
    "so",
    "please",
    "confirm",
    "the",
    "schedule",
    "with",
    "finance",
    "before",
    "friday",
    "thanks",
    "for",
    "the",
    "update",
    "about",
    "deployment",
    "pipeline",
    "latency",
    "metrics",
    "dashboard",
    "invoice",
    "contract",
    "draft",
]
BASE62 = string.ascii_letters + string.digits
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IN", "JP", "BR", "AU", "CA", "MX", "NG", "ES", "IT")


@dataclass(frozen=True)
class Sample:
    """One corpus string and the span and kind of its planted value ("" when none, or when
    the planted value is an invalid twin that must not match)."""

    text: str
    kind: str
    start: int
    end: int
    planted: str  # the kind of what was planted, valid or not, for the report


def _digits(rng: random.Random, count: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(count))


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 16))]
    return " ".join(words).capitalize() + rng.choice([".", ".", ",", ";", "!"])


def distractor(rng: random.Random) -> str:
    """Return one thing that looks like data but is none of the kinds."""
    choice = rng.randrange(18)
    if choice == 14:
        return f"https://example.com/v1/items/{rng.randint(1, 99999)}?page={rng.randint(1, 9)}"
    if choice == 15:  # a four-part version: the ones under 256 are IPv4 addresses too
        major, minor, build = rng.randint(1, 30), rng.randint(0, 20), rng.randint(0, 9999)
        return f"{major}.{minor}.{build}.{rng.randint(0, 300)}"
    if choice == 16:
        build, patch = rng.randint(1000, 6999), rng.randint(10, 200)
        return f"Mozilla/5.0 Chrome/{rng.randint(90, 130)}.0.{build}.{patch}"
    if choice == 17:
        return f"src/app/{rng.choice(WORDS)}_{rng.randint(1, 99)}.py:{rng.randint(1, 999)}"
    if choice == 0:
        return f"{rng.randint(2015, 2027)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if choice == 1:
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    if choice == 2:
        return f"${rng.randint(1, 9)},{rng.randint(0, 999):03d}.{rng.randint(0, 99):02d}"
    if choice == 3:
        return f"v{rng.randint(0, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 30)}"
    if choice == 4:
        return f"ORD-{_digits(rng, 8)}"
    if choice == 5:
        return str(random.Random(rng.random()).getrandbits(128).to_bytes(16, "big").hex())
    if choice == 6:
        hex_id = f"{rng.getrandbits(128):032x}"
        return f"{hex_id[:8]}-{hex_id[8:12]}-{hex_id[12:16]}-{hex_id[16:20]}-{hex_id[20:]}"
    if choice == 7:
        return str(rng.randint(1_600_000_000, 1_800_000_000))  # a unix timestamp
    if choice == 8:
        return f"{rng.randint(2015, 2027)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"  # noqa: E501
    if choice == 9:
        return f"{_digits(rng, 5)}-{_digits(rng, 4)}"  # zip+4
    if choice == 10:
        return f"#{_digits(rng, rng.randint(6, 12))}"
    if choice == 11:
        return f"{rng.randint(1, 99)}.{rng.randint(0, 9)}%"
    if choice == 12:
        return f"{rng.getrandbits(160):040x}"  # a commit hash
    return f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(2015, 2027)}"


def _with_luhn(body: str) -> str:
    for check in string.digits:
        if luhn_valid(body + check):
            return body + check
    raise AssertionError("unreachable")


CARD_PREFIXES = {
    "visa": (("4",), (16, 13, 19)),
    "mastercard": (("51", "52", "53", "54", "55", "2221", "2500", "2720"), (16,)),
    "amex": (("34", "37"), (15,)),
    "discover": (("6011", "644", "65", "622126"), (16, 19)),
    "jcb": (("3528", "3589"), (16,)),
    "diners": (("300", "305", "36", "38"), (14,)),
    "unionpay": (("62",), (16, 19)),
}


def card(rng: random.Random) -> str:
    """Return a Luhn-valid number of a random brand, written whole or grouped."""
    prefixes, lengths = CARD_PREFIXES[rng.choice(list(CARD_PREFIXES))]
    prefix, length = rng.choice(prefixes), rng.choice(lengths)
    number = _with_luhn(prefix + _digits(rng, length - len(prefix) - 1))
    style = rng.randrange(3)
    if style == 0:
        return number
    separator = " " if style == 1 else "-"
    if length == 15:
        return separator.join((number[:4], number[4:10], number[10:]))
    return separator.join(number[i : i + 4] for i in range(0, length, 4))


def iban(rng: random.Random) -> str:
    """Return a mod-97-valid IBAN of a random registry country, whole or in groups of four."""
    country = rng.choice(sorted(IBAN_LENGTHS))
    length = IBAN_LENGTHS[country]
    bban = "".join(
        rng.choice(string.ascii_uppercase) if rng.random() < 0.1 else rng.choice(string.digits)
        for _ in range(length - 4)
    )
    number = int("".join(str(int(char, 36)) for char in bban + country + "00"))
    compact = f"{country}{98 - number % 97:02d}{bban}"
    if rng.random() < 0.5:
        return compact
    return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))


def ssn(rng: random.Random) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    separator = rng.choice("- ")
    group, serial = rng.randint(1, 99), rng.randint(1, 9999)
    return f"{area:03d}{separator}{group:02d}{separator}{serial:04d}"


def phone(rng: random.Random) -> str:
    """Return a valid number: a US one in national format, others in international format."""
    while True:
        region = rng.choice(PHONE_REGIONS)
        number_type = rng.choice(
            (phonenumbers.PhoneNumberType.MOBILE, phonenumbers.PhoneNumberType.FIXED_LINE)
        )
        example = phonenumbers.example_number_for_type(region, number_type)
        assert example is not None  # each of PHONE_REGIONS has both kinds
        national = str(example.national_number)
        national = national[:-4] + _digits(rng, 4)
        number = phonenumbers.parse("+" + str(example.country_code) + national)
        if not phonenumbers.is_valid_number(number):
            continue
        if region == "US":
            text = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
            return text if rng.random() < 0.5 else text.replace("(", "").replace(") ", "-")
        return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)


def ip_address(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return str(ipaddress.IPv4Address(rng.getrandbits(32)))
    address = ipaddress.IPv6Address(
        rng.getrandbits(128) if rng.random() < 0.5 else ((0x2001_0DB8 << 96) | rng.getrandbits(16))
    )
    return address.exploded if rng.random() < 0.3 else address.compressed


def email(rng: random.Random) -> str:
    first, last = rng.choice(WORDS), rng.choice(WORDS)
    local = rng.choice((f"{first}.{last}", f"{first}{rng.randint(1, 99)}", f"{first}+{last}"))
    domain = rng.choice(("example.com", "mail.example.co.uk", "corp.io", "uni-berlin.de"))
    return f"{local}@{domain}"


def _token(rng: random.Random, count: int, alphabet: str = BASE62) -> str:
    while True:
        token = "".join(rng.choice(alphabet) for _ in range(count))
        if any(c.isdigit() for c in token) and any(c.isalpha() for c in token):
            return token


def credential(rng: random.Random) -> str:
    choice = rng.randrange(9)
    if choice == 0:
        return "sk-" + _token(rng, 48)
    if choice == 1:
        return "sk-proj-" + _token(rng, 156, BASE62 + "_-")
    if choice == 2:
        return "sk-ant-api03-" + _token(rng, 93, BASE62 + "_-") + "AA"
    if choice == 3:
        return rng.choice(("AKIA", "ASIA")) + _token(rng, 16, string.ascii_uppercase + "234567")
    if choice == 4:
        return "AIza" + _token(rng, 35, BASE62 + "_-")
    if choice == 5:
        return rng.choice(("ghp_", "gho_", "ghu_", "ghs_", "ghr_")) + _token(rng, 36)
    if choice == 6:
        return f"xoxb-{_digits(rng, 12)}-{_digits(rng, 13)}-{_token(rng, 24)}"
    if choice == 7:
        head = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
        return f"{head}.eyJ{_token(rng, 60, BASE62 + '_-')}.{_token(rng, 43, BASE62 + '_-')}"
    body = "\n".join(_token(rng, 64, BASE62 + "+/") for _ in range(rng.randint(5, 25)))
    kind = rng.choice(("", "RSA ", "EC ", "OPENSSH "))
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


VALID = {
    "email": email, "phone": phone, "payment_card": card, "iban": iban, "us_ssn": ssn,
    "ip_address": ip_address, "credential": credential,
}  # fmt: skip


def invalid(kind: str, rng: random.Random) -> str:
    """Return an invalid twin of a valid value of `kind`: it must not match."""
    if kind == "payment_card":
        value = card(rng)
        index = max(i for i, c in enumerate(value) if c.isdigit())  # the check digit
        return (
            value[:index] + str((int(value[index]) + rng.randint(1, 9)) % 10) + value[index + 1 :]
        )
    if kind == "iban":
        value = iban(rng)
        return value[:2] + f"{(int(value[2:4]) + rng.randint(1, 50)) % 97 + 2:02d}"[:2] + value[4:]
    if kind == "us_ssn":
        area = rng.choice(("000", "666", f"9{_digits(rng, 2)}"))
        return f"{area}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"
    if kind == "ip_address":
        return f"{rng.randint(256, 999)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}"  # noqa: E501
    if kind == "phone":
        return f"+1 {rng.choice('01')}{_digits(rng, 2)} 555 {_digits(rng, 4)}"  # area 0xx/1xx
    if kind == "email":
        return f"{rng.choice(WORDS)}@{rng.choice(WORDS)}"  # no domain suffix
    return rng.choice(
        (
            "sk-learn", "sk-" + "x" * 40, "task-" + _token(rng, 30), "AKIA" + "EXAMPLE",
            "ghp_" + _token(rng, 20), "xoxb-test-token", "eyJhbGciOi.notajwt",
            "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
        )
    )  # fmt: skip


def sample(rng: random.Random) -> Sample:
    """Return prose with distractors and, three times in four, one planted value (valid two
    times in three)."""
    parts = [_sentence(rng) for _ in range(rng.randint(1, 3))]
    for _ in range(rng.randint(0, 3)):
        index = rng.randrange(len(parts) + 1)
        parts.insert(
            index, rng.choice(("ref", "on", "at", "id", "of", "v")) + " " + distractor(rng)
        )
    if rng.random() < 0.25:
        return Sample(" ".join(parts), "", 0, 0, "")
    kind = rng.choice(sorted(VALID))
    valid = rng.random() < 2 / 3
    value = VALID[kind](rng) if valid else invalid(kind, rng)
    index = rng.randrange(len(parts) + 1)
    before = " ".join(parts[:index]) + (" " if index else "")
    lead, tail = rng.choice(
        (
            ("", ""), ("my ", "."), ("use ", ","), ("(", ")"), ("send to ", " please"),
            ('{"value": "', '"}'), ("`", "`"), ("KEY=", "\n"), ("\n", "\n"), ("<", ">"),
            ("mailto:" if kind == "email" else "id: ", ";"), ("'", "'"), ("- ", ""),
        )
    )  # fmt: skip
    text = before + lead + value + tail + (" " + " ".join(parts[index:]) if parts[index:] else "")
    start = len(before) + len(lead)
    if not valid:
        return Sample(text, "", 0, 0, kind)
    return Sample(text, kind, start, start + len(value), kind)


def corpus(size: int, seed: int = 43) -> list[Sample]:
    rng = random.Random(seed)
    return [sample(rng) for _ in range(size)]
