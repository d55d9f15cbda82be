"""Check digits and registries behind the checksummed detectors: payment cards (Luhn and the
brands' IIN ranges), IBANs (ISO 13616 lengths and mod-97) and US Social Security numbers (the
SSA's never-issued numbers). Plain functions of digits, so a candidate a regular expression
found costs microseconds to confirm or drop."""

from __future__ import annotations

# ISO 13616 registry (SWIFT's IBAN registry): total IBAN length per country code.
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def luhn_valid(digits: str) -> bool:
    """Say whether a digit string passes the Luhn check (ISO/IEC 7812)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def card_brand(digits: str) -> str | None:
    """Name the card network whose IIN range and lengths a number fits, or None.

    Only ranges that are issued count, so a Luhn-valid run of digits that no network issues
    (an order id, a timestamp pair) is not a card.
    """
    length = len(digits)
    two, three, four, six = int(digits[:2]), int(digits[:3]), int(digits[:4]), int(digits[:6])
    if digits[0] == "4" and length in (13, 16, 19):
        return "visa"
    if (51 <= two <= 55 or 2221 <= four <= 2720) and length == 16:
        return "mastercard"
    if two in (34, 37) and length == 15:
        return "amex"
    if (
        four == 6011 or 644 <= three <= 649 or two == 65 or 622126 <= six <= 622925
    ) and 16 <= length <= 19:
        return "discover"
    if 3528 <= four <= 3589 and 16 <= length <= 19:
        return "jcb"
    if (300 <= three <= 305 or two in (36, 38, 39) or four == 3095) and 14 <= length <= 19:
        return "diners"
    if two == 62 and 16 <= length <= 19:
        return "unionpay"
    return None


def iban_valid(compact: str) -> bool:
    """Say whether an IBAN without spaces has its country's registry length and mod-97 == 1."""
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact[2:4].isdigit():
        return False
    rearranged = compact[4:] + compact[:4]
    # Letters count as two digits (A=10 ... Z=35), ISO 7064 MOD 97-10.
    number = "".join(str(int(char, 36)) for char in rearranged)
    return int(number) % 97 == 1


def ssn_valid(area: str, group: str, serial: str) -> bool:
    """Say whether an SSN's parts could have been issued: area not 000, 666 or 9xx (those are
    reserved or ITINs), group not 00, serial not 0000."""
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"
