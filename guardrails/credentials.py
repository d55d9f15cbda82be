"""Credential detectors: the shapes vendors give their secrets, reported as kind `credential`
with the vendor as label. Each shape is tight (its prefix, alphabet and length) and must stand
alone (no token character glued on either side), so look-alikes in prose and code
(`sk-learn`, `task-runner`, `AKIAEXAMPLE`, a placeholder of x's) do not match."""

from __future__ import annotations

from guardrails.matches import ALNUM, TOKEN, Detector, Validator, byte_at, glued

# Longest JWT and PEM block a detector matches: a JWT carrying a large claim set, and a
# 4096-bit RSA key with headers (about 3.3 kB) with room to spare. Longer ones are not matched.
JWT_MAX_CHARS = 8192
PEM_MAX_CHARS = 8192
JWT_SEGMENT = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-."


_JWT_BYTES = frozenset(JWT_SEGMENT)


_UPPER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = frozenset(b"abcdefghijklmnopqrstuvwxyz")
_DIGIT = frozenset(b"0123456789")


def _has_digit_and_letter(body: bytes) -> bool:
    # Random keys of 20+ base62 characters carry both; words and placeholders often do not.
    return not _DIGIT.isdisjoint(body) and not (_UPPER | _LOWER).isdisjoint(body)


def _looks_random(body: bytes) -> bool:
    """Say whether a key body mixes capitals, small letters and digits, as 32 or more random
    base62 characters do (all but one time in billions): a slug like
    "sk-assessment-2024-q1-plan" does not."""
    return len(body) >= 32 and all(not chars.isdisjoint(body) for chars in (_UPPER, _LOWER, _DIGIT))


def _openai(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if glued(data, start, end, TOKEN):
        return None
    body = data[start + 3 : end]
    if body.startswith(b"ant-") or not _looks_random(body):
        return None  # sk-ant- is Anthropic's
    return start, end


def _anthropic(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if glued(data, start, end, TOKEN) or not _looks_random(data[start + 7 : end]):
        return None
    return start, end


def _standalone(chars: frozenset[int]) -> Validator:
    def validate(data: bytes, start: int, end: int) -> tuple[int, int] | None:
        return None if glued(data, start, end, chars) else (start, end)

    return validate


def _slack(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if glued(data, start, end, TOKEN) or end - start < 24:
        return None
    return (start, end) if _has_digit_and_letter(data[start + 5 : end]) else None


def _jwt(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if end - start > JWT_MAX_CHARS or byte_at(data, start - 1) in _JWT_BYTES:
        return None
    after = byte_at(data, end)
    if after in TOKEN or after == 46 and byte_at(data, end + 1) in TOKEN:
        return None  # a fourth segment: not a JWT (a full stop after one is fine)
    return start, end


def _pem(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    # A block is the last private-key BEGIN line before its END line: an unclosed BEGIN
    # earlier in the text (a truncated paste) is not part of it.
    end_line = data.rindex(b"-----END ", start, end)
    begin = end_line
    while True:
        begin = data.rfind(b"-----BEGIN ", start, begin)
        if b"PRIVATE KEY" in data[begin : data.index(b"-----", begin + 11)]:
            break
    # The END line must name the same key type as the BEGIN line.
    begin_type = data[begin + 11 : data.index(b"PRIVATE KEY", begin)]
    end_type = data[end_line + 9 : data.index(b"PRIVATE KEY", end_line)]
    if end - begin > PEM_MAX_CHARS or begin_type != end_type:
        return None
    return begin, end


CREDENTIAL_DETECTORS: tuple[Detector, ...] = (
    # Anthropic first: on the same span (sk-ant-...) it is the more specific name.
    Detector(
        "credential",
        "anthropic",
        r"sk-ant-[A-Za-z0-9_-]{32,250}",
        _anthropic,
        257,
        hint="sk-ant-",
        whole_token=True,
    ),
    Detector(
        "credential",
        "openai",
        r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,250}",
        _openai,
        261,
        hint="sk-",
        whole_token=True,
    ),
    # AWS key ids are base32 ([A-Z2-7]) after the four-letter type prefix.
    Detector(
        "credential",
        "aws",
        r"(?:AKIA|ASIA)[A-Z2-7]{16}",
        _standalone(ALNUM),
        20,
        hint="AKIA|ASIA",
        whole_token=True,
    ),
    Detector(
        "credential",
        "google",
        r"AIza[0-9A-Za-z_-]{35}",
        _standalone(TOKEN),
        39,
        hint="AIza",
        whole_token=True,
    ),
    Detector(
        "credential",
        "github",
        r"gh[pousr]_[A-Za-z0-9]{36}",
        _standalone(TOKEN),
        40,
        hint="gh[pousr]_",
        whole_token=True,
    ),
    Detector(
        "credential",
        "github",
        r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}",
        _standalone(TOKEN),
        93,
        hint="github_pat_",
        whole_token=True,
    ),
    Detector(
        "credential",
        "slack",
        r"xox[abprs]-[0-9A-Za-z]{1,64}(?:-[0-9A-Za-z]{1,64}){1,3}",
        _slack,
        265,
        hint="xox[abprs]-",
        whole_token=True,
    ),
    Detector(
        "credential",
        "jwt",
        r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        _jwt,
        JWT_MAX_CHARS,
        hint=r"eyJ[A-Za-z0-9_-]*\.eyJ",
        whole_token=True,
    ),
    Detector(
        "credential",
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY-----(?s:.)+?"
        r"-----END (?:[A-Z0-9]+ ){0,3}PRIVATE KEY-----",
        _pem,
        PEM_MAX_CHARS,
        hint="-----BEGIN ",
    ),
)

_JWT_CHARACTERS = JWT_SEGMENT.decode()


def unfinished_long_credential(text: str, start: int) -> int | None:
    """Return where, at or after `start`, a PEM private key block or a JWT begins that the
    text's end may still be inside of (a BEGIN line with no END after it; a JWT-shaped run
    reaching the end), or None. The stream holds text back from there, up to the cap."""
    earliest: int | None = None
    begin = len(text)
    while (begin := text.rfind("-----BEGIN ", start, begin)) != -1:
        if len(text) - begin >= PEM_MAX_CHARS:
            break
        end_line = text.find("-----END ", begin)
        if end_line != -1 and text.find("PRIVATE KEY-----", end_line) != -1:
            break  # closed
        header_end = text.find("-----", begin + 11)
        if header_end == -1 or "PRIVATE KEY" in text[begin:header_end]:
            earliest = begin  # its END line has not (wholly) arrived
            break
    # A JWT starts a run of JWT characters (nothing glued before it): the last run, when it
    # reaches the end of the text, may be one still arriving.
    floor = max(start, len(text) - JWT_MAX_CHARS)
    run_start = floor + len(text[floor:].rstrip(_JWT_CHARACTERS))
    before = text[run_start - 1] if run_start > 0 else " "
    if text.startswith("eyJ", run_start) and before not in _JWT_CHARACTERS:
        earliest = run_start if earliest is None else min(earliest, run_start)
    return earliest
