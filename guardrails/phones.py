"""The phone check: a candidate the pattern found is a phone number when Google's
`phonenumbers` metadata says it is a valid number, and, for a national number (no `+`), when
it is grouped the way its region writes numbers. Grouping is what tells "415-555-2671" from a
timestamp "2024-12-07 13" or an address "212.58.244.20", whose digits may spell a valid
number too. Parsing costs tens of microseconds, so digit counts the region cannot have are
dropped before it."""

from __future__ import annotations

import functools

import phonenumbers

from guardrails.matches import ALNUM, DIGITS, byte_at, continues_number


def _digit_groups(text: str) -> list[tuple[int, int]]:
    """Return the (start, end) of each run of digits in a short candidate."""
    groups: list[tuple[int, int]] = []
    start = -1
    for index, char in enumerate(text):
        if char.isdigit():
            if start < 0:
                start = index
        elif start >= 0:
            groups.append((start, index))
            start = -1
    if start >= 0:
        groups.append((start, len(text)))
    return groups


class PhoneCheck:
    """Validate phone candidates, reading national numbers as numbers of `region`."""

    def __init__(self, region: str) -> None:
        metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
        if metadata is None:
            raise ValueError(f"unknown phone region {region!r}")
        self.region = region
        self.national_prefix = metadata.national_prefix or ""
        self.country_code = metadata.country_code or 0
        general = metadata.general_desc
        lengths = set(general.possible_length or ()) if general is not None else set()
        self.plain_lengths = frozenset(lengths)
        prefixed = {length + len(self.national_prefix) for length in lengths}
        self.national_lengths = frozenset(lengths | (prefixed if self.national_prefix else set()))
        # How the region groups its numbers (from its example numbers of every type): a
        # candidate grouped otherwise is dropped before paying for a parse.
        self.national_groupings = frozenset(
            tuple(self._sizes(_example(region, number_type)))
            for number_type in phonenumbers.PhoneNumberType.values()
            if _example(region, number_type)
        )
        # The candidate pattern: `+` and 7 to 15 digits, or a national number in one of the
        # region's groupings, so dates, times, ids and bare runs of digits are never candidates.
        trunk = f"(?:{self.national_prefix}[ .-]?)?" if self.national_prefix else ""
        national = "|".join(
            rf"\(?[0-9]{{{sizes[0]}}}\)?"
            + "".join(
                rf"[ .-]{{{1 if i else 0},2}}[0-9]{{{size}}}" for i, size in enumerate(sizes[1:])
            )
            for sizes in sorted(self.national_groupings)
            if sizes
        )
        self.pattern = r"\+[0-9](?:[ .()-]{0,2}[0-9]){6,14}" + (
            f"|{trunk}(?:{national})" if national else ""
        )
        self.max_chars = 3 * max(15, max(self.national_lengths)) + 2
        # In every match: "+" and a digit, or two digit groups meeting at a separator or a
        # bracket (a national number written without either is never grouped as one).
        self.hint = r"\+[0-9]|[0-9]\)?[ .-]{1,2}\(?[0-9]|[0-9]\)[0-9]"

    def __call__(self, data: bytes, start: int, end: int) -> tuple[int, int] | None:
        if _glued(data, start, end) or continues_number(data, start, end):
            return None
        if data[start] == 40 and data[start:end].find(b")") == -1:
            start += 1  # "(415-555-2671)": the bracket is the sentence's, not the number's
        text = data[start:end].decode()
        groups = _digit_groups(text)
        international = text.startswith("+")
        # Longest prefix of whole digit groups first: "415-555-2671 2 times" holds a number.
        for count in range(len(groups), max(0, len(groups) - 3), -1):
            candidate = text[: groups[count - 1][1]]
            digit_count = sum(b - a for a, b in groups[:count])
            if international:
                if not 7 <= digit_count <= 15 or not _possible_international(
                    "".join(candidate[a:b] for a, b in groups[:count])
                ):
                    continue  # no country has numbers this many digits long
            elif (
                count < 2
                or digit_count not in self.national_lengths
                or tuple(self._sizes(candidate, groups[:count])) not in self.national_groupings
            ):
                continue  # a bare run of digits is an id, not a phone; or grouped unlike one
            digits = "".join(candidate[a:b] for a, b in groups[:count])
            number = self._number(digits, international) or _parse(candidate, self.region)
            if number is None or not phonenumbers.is_valid_number(number):
                continue
            if not international and not self._grouped_as_written(
                number, candidate, groups[:count]
            ):
                continue
            if count < len(groups) or not _runs_on(data, start + len(candidate)):
                return start, start + len(candidate)
        return None

    def _number(self, digits: str, international: bool) -> phonenumbers.PhoneNumber | None:
        """Build the number from its digits without `phonenumbers.parse` (a third of the
        cost) where parsing could do nothing else: the country strips no more than its plain
        trunk prefix, and no leading zero is kept. None: leave it to `parse`."""
        if international:
            size = next(n for n in (1, 2, 3) if _national_lengths(int(digits[:n])) is not None)
            country_code, national = int(digits[:size]), digits[size:]
        else:
            country_code, national = self.country_code, digits
            prefix = self.national_prefix
            if prefix and national.startswith(prefix) and len(national) not in self.plain_lengths:
                national = national[len(prefix) :]
        if national.startswith("0") or not _plain_prefix(country_code):
            return None
        return phonenumbers.PhoneNumber(country_code=country_code, national_number=int(national))

    def _grouped_as_written(
        self, number: phonenumbers.PhoneNumber, candidate: str, groups: list[tuple[int, int]]
    ) -> bool:
        formatted = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
        return self._sizes(candidate, groups) == self._sizes(formatted)

    def _sizes(self, text: str, groups: list[tuple[int, int]] | None = None) -> list[int]:
        """Return the sizes of the digit groups of a national number, without a leading
        trunk prefix written as its own group (1-800-555-0199 is grouped as 800-555-0199)."""
        groups = _digit_groups(text) if groups is None else groups
        sizes = [end - start for start, end in groups]
        if self.national_prefix and text[groups[0][0] : groups[0][1]] == self.national_prefix:
            sizes = sizes[1:]
        return sizes


def _possible_international(digits: str) -> bool:
    """Say whether some country code starts digits and numbers of that country can have the
    rest's length (country codes are prefix-free: at most one of 1 to 3 digits is one)."""
    for size in (1, 2, 3):
        lengths = _national_lengths(int(digits[:size]))
        if lengths is not None:
            return len(digits) - size in lengths
    return False


@functools.lru_cache(maxsize=512)
def _national_lengths(country_code: int) -> frozenset[int] | None:
    if country_code not in phonenumbers.COUNTRY_CODE_TO_REGION_CODE:
        return None
    lengths: set[int] = set()
    for region in phonenumbers.COUNTRY_CODE_TO_REGION_CODE[country_code]:
        metadata = (
            phonenumbers.PhoneMetadata.metadata_for_nongeo_region(country_code)
            if region == phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY
            else phonenumbers.PhoneMetadata.metadata_for_region(region)
        )
        general = metadata.general_desc if metadata is not None else None
        if general is not None:
            lengths.update(general.possible_length or ())
    return frozenset(lengths)


def _parse(candidate: str, region: str) -> phonenumbers.PhoneNumber | None:
    try:
        return phonenumbers.parse(candidate, region)
    except phonenumbers.NumberParseException:
        return None


@functools.lru_cache(maxsize=512)
def _plain_prefix(country_code: int) -> bool:
    """Say whether every region of a country code strips at most its plain trunk prefix when
    parsing (Argentina, Brazil, Japan and a few more rewrite numbers: those go to parse)."""
    for region in phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(country_code, ()):
        metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
        if metadata is None or metadata.national_prefix_transform_rule is not None:
            return False
        parsing = metadata.national_prefix_for_parsing
        if parsing is not None and parsing != metadata.national_prefix:
            return False
    return True


def _example(region: str, number_type: int) -> str:
    example = phonenumbers.example_number_for_type(region, number_type)
    if example is None:
        return ""
    return phonenumbers.format_number(example, phonenumbers.PhoneNumberFormat.NATIONAL)


def _glued(data: bytes, start: int, end: int) -> bool:
    """Say whether a phone candidate is part of a longer token (an id, a version, a key)."""
    before = byte_at(data, start - 1)
    return before in ALNUM or before in b"+_" or byte_at(data, end) in ALNUM


def _runs_on(data: bytes, end: int) -> bool:
    return byte_at(data, end) in DIGITS or byte_at(data, end) in ALNUM
