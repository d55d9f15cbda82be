"""Which models a virtual key may call: the one rule, used by enforcement and by listing.

A key's models are said by entries: its own `allowed_models` and the entries of the access
groups (AccessGroup) assigned to it or to its budget group. An entry is a model name or a
pattern, and it matches one *offering*: one profile's offer of one canonical model.

How an entry matches an offering (`Rule.matches`):
- an entry without `*` is an exact name: the offering's canonical model name, an alias the
  catalog resolves to that model, or either of those under the offering's profile name or
  its provider kind: `gpt-4o-mini`, `gpt-fast` (an alias), `stub-openai/gpt-4o-mini`,
  `openai/gpt-4o-mini`;
- an entry with `*` is a pattern; `*` stands for any run of characters (`/` included) and
  nothing else is special. A pattern matches canonical names only, bare or under the profile
  or provider kind: `gpt-*`, `*-mini`, `anthropic/*` (every model an Anthropic-kind profile
  offers), `stub-openai/*`. Patterns never look at aliases: an alias `gpt-fast` of a Claude
  model does not let `gpt-*` reach Claude.

How they combine (`policy_of`):
- the key's side is its own names plus the entries of its access groups; with neither, the
  key's side is unrestricted;
- the group's side is the entries of the budget group's access groups; with none, it is
  unrestricted. It bounds every key of the group, whatever the key's own side says;
- an offering is permitted when both sides permit it (the intersection).

A request for a name is served by the offerings it resolves to that are permitted (a
canonical name's fan-out keeps only permitted profiles); none permitted is LM-1003. A name
is listed by /v1/models exactly when that same set is non-empty (gateway/access.py).

Entries are bounded (ENTRY_MAX_CHARS, ENTRIES_MAX, STARS_MAX, ENTRY_CHARS) and matched
without backtracking regular expressions: a pattern is split at its stars and its pieces are
found in order, at most O(len(entry) x len(name)) work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

ENTRY_MAX_CHARS = 200  # as a model name may be (ProviderModel.name)
ENTRIES_MAX = 100  # per access group, and per key's own list
STARS_MAX = 4  # `*` in one entry
ACCESS_GROUPS_MAX = 20  # assigned to one key or one group
VERDICTS_MAX = 10_000  # offerings one policy remembers its verdict on
ENTRY_CHARS = re.compile(r"[A-Za-z0-9._:@+/*-]+")
NAME_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # an access group's name


class BadEntry(ValueError):
    """An entry or a list of them that the rule refuses, with a message a person can act on."""


def entry_problem(entry: object) -> str | None:
    """Return why `entry` is not a valid model name or pattern, or None if it is."""
    if not isinstance(entry, str) or not entry:
        return "an entry is a non-empty string"
    shown = entry[:40] + ("…" if len(entry) > 40 else "")
    if len(entry) > ENTRY_MAX_CHARS:
        return f"{shown!r} is over {ENTRY_MAX_CHARS} characters"
    if not ENTRY_CHARS.fullmatch(entry):
        return (
            f"{shown!r} has a character outside letters, digits and . _ : @ + / - * "
            "(only * is a wildcard)"
        )
    if entry.count("*") > STARS_MAX:
        return f"{shown!r} has more than {STARS_MAX} '*'"
    if entry.startswith("/") or entry.endswith("/") or "//" in entry:
        return f"{shown!r} has an empty part around '/'"
    return None


def clean_entries(entries: object) -> list[str]:
    """Return the entries deduplicated in their order, or raise BadEntry naming the first
    bad one (all bounds of the module docstring)."""
    if not isinstance(entries, list):
        raise BadEntry("Model entries are a list of names or patterns.")
    if len(entries) > ENTRIES_MAX:
        raise BadEntry(f"At most {ENTRIES_MAX} model entries are allowed; got {len(entries)}.")
    for entry in entries:
        problem = entry_problem(entry)
        if problem:
            raise BadEntry(f"Bad model entry: {problem}.")
    return list(dict.fromkeys(entries))


def name_problem(name: object) -> str | None:
    """Return why `name` cannot name an access group, or None."""
    if not isinstance(name, str) or not NAME_CHARS.fullmatch(name):
        return (
            "an access group's name is 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return None


@dataclass(frozen=True, slots=True)
class Offering:
    """One profile's offer of one canonical model, as the rule sees it."""

    profile: str
    provider: str  # the profile's kind: openai, anthropic, openrouter, ...
    model: str  # the canonical name
    aliases: tuple[str, ...] = ()  # names the catalog resolves to `model`

    def names(self) -> tuple[str, ...]:
        """Return the canonical name bare and under the profile and the provider kind."""
        m = self.model
        return (m, f"{self.profile}/{m}", f"{self.provider}/{m}")

    def alias_names(self) -> tuple[str, ...]:
        return tuple(
            form
            for alias in self.aliases
            for form in (alias, f"{self.profile}/{alias}", f"{self.provider}/{alias}")
        )


def glob_match(pieces: tuple[str, ...], name: str) -> bool:
    """Say whether `name` matches a pattern split at its stars (`pieces`, 2 or more): the
    first piece is a prefix, the last a suffix, the middle ones found in order, leftmost
    first (for `*` alone, leftmost is always right: no backtracking needed)."""
    head, *middle, tail = pieces
    if len(name) < len(head) + len(tail) or not name.startswith(head):
        return False
    end = len(name) - len(tail)
    if not name.endswith(tail):
        return False
    at = len(head)
    for piece in middle:
        found = name.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


@dataclass(frozen=True, slots=True)
class Rule:
    """One side's entries, compiled: the exact names and the patterns' pieces."""

    entries: tuple[str, ...]
    exact: frozenset[str]
    patterns: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, entries: Iterable[str]) -> Rule:
        kept = tuple(dict.fromkeys(entries))
        return cls(
            entries=kept,
            exact=frozenset(e for e in kept if "*" not in e),
            patterns=tuple(tuple(e.split("*")) for e in kept if "*" in e),
        )

    def matches(self, offering: Offering) -> bool:
        """Say whether an entry names this offering (the module docstring's rule)."""
        names = offering.names()
        if any(name in self.exact for name in names):
            return True
        if self.exact and any(name in self.exact for name in offering.alias_names()):
            return True
        return any(glob_match(pieces, name) for pieces in self.patterns for name in names)


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """A key's effective rule: its own side and its group's; None is unrestricted."""

    key: Rule | None = None
    group: Rule | None = None
    # Verdicts so far, by offering: a request re-asks about the same few offerings, and the
    # policy lives as long as its key's cache entry. At most one per offering of the catalog
    # (and of catalogs before a reload), so it stays small.
    _verdicts: dict[Offering, bool] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @property
    def unrestricted(self) -> bool:
        return self.key is None and self.group is None

    def permits(self, offering: Offering) -> bool:
        """Say whether the key may call this offering: both sides must permit it."""
        verdict = self._verdicts.get(offering)
        if verdict is None:
            verdict = (self.key is None or self.key.matches(offering)) and (
                self.group is None or self.group.matches(offering)
            )
            if len(self._verdicts) < VERDICTS_MAX:
                self._verdicts[offering] = verdict
        return verdict

    def entries(self) -> tuple[str, ...]:
        """Return the entries that bound the key, its side's first (for messages)."""
        own = self.key.entries if self.key else ()
        bound = self.group.entries if self.group else ()
        return tuple(dict.fromkeys([*own, *bound]))


UNRESTRICTED = AccessPolicy()


def policy_of(
    *,
    key_names: Iterable[str] = (),
    key_groups: Iterable[Iterable[str]] = (),
    group_groups: Iterable[Iterable[str]] = (),
) -> AccessPolicy:
    """Compile a key's policy from its own names, its access groups' entries and its budget
    group's access groups' entries. An access group assigned counts even when it has no
    entries (it then permits nothing), so assigning one never widens a key."""
    names = list(key_names)
    own_groups = [list(entries) for entries in key_groups]
    bounding = [list(entries) for entries in group_groups]
    key = (
        Rule.of([*names, *(e for entries in own_groups for e in entries)])
        if names or own_groups
        else None
    )
    group = Rule.of([e for entries in bounding for e in entries]) if bounding else None
    return AccessPolicy(key=key, group=group)


def briefly(names: list[str], *, shown: int = 5) -> str:
    """Return a short list for a message: the first `shown`, then "and N more"."""
    if not names:
        return "none"
    head = ", ".join(names[:shown])
    rest = len(names) - shown
    return f"{head} and {rest} more" if rest > 0 else head


def refusal_message(name: str, allowed: list[str]) -> str:
    """Say that the key may not call `name` and name, briefly, the canonical models it may
    call (only its own: nothing of another account's ever appears)."""
    shown = name[:200]
    if not allowed:
        return f"This key may not use model {shown!r}: its access allows no model served here."
    return (
        f"This key may not use model {shown!r}. It may use: {briefly(allowed)}"
        " (GET /v1/models lists them)."
    )
