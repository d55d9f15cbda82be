"""Over random catalogs and random policies, /v1/models lists exactly what enforcement lets a
key call, and both follow the rule accounts/model_access.py states.

Listing is gateway.access.listed_models (what /v1/models answers); enforcement is
gateway.plan.offers_for (what a request meets: LM-1003 or the offers it is served by). The
oracle is the rule's docstring written the slow, obvious way, with fnmatch for the stars.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts.model_access import (
    BadEntry,
    clean_entries,
    entry_problem,
    glob_match,
    policy_of,
)
from core.errors import Forbidden
from gateway.access import listed_models
from gateway.catalog import Catalog, ModelOffer
from gateway.plan import offers_for
from tests.unit.gateway.test_plan import offer, principal, profile

PROFILES = [
    ("p-open", "openai"),
    ("p-anth", "anthropic"),
    ("p-router", "openrouter"),
    ("openai", "openai"),
]
MODELS = ["gpt-4o", "gpt-4o-mini", "claude-3", "claude-3-haiku", "llama", "meta/llama", "o1"]
ALIASES = ["mini", "fast", "gpt-fast", "haiku", "gpt-4o", "llama-x"]  # "gpt-4o" may clash
FRAGMENTS = ["gpt", "claude", "4o", "mini", "-", "3", "llama", "meta", "o1", "haiku", "x"]


@dataclass(frozen=True)
class World:
    catalog: Catalog
    offers: tuple[ModelOffer, ...]


@st.composite
def worlds(draw) -> World:
    chosen = draw(st.lists(st.sampled_from(PROFILES), min_size=1, max_size=4, unique=True))
    offers = []
    for name, kind in chosen:
        prof = profile(name, kind=kind)
        for model in draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=4, unique=True)):
            aliases = tuple(
                a
                for a in draw(st.lists(st.sampled_from(ALIASES), max_size=2, unique=True))
                if a != model
            )
            made = offer(prof, model, draw(st.integers(1, 9)) * 1000, 1000, 4096)
            offers.append(_with_aliases(made, aliases))
    by_model: dict[str, tuple[ModelOffer, ...]] = {}
    for o in offers:
        by_model[o.name] = (*by_model.get(o.name, ()), o)
    catalog = Catalog(
        profiles={o.profile.name: o.profile for o in offers}, offers_by_model=by_model
    )
    return World(catalog=catalog, offers=tuple(offers))


def _with_aliases(made: ModelOffer, aliases: tuple[str, ...]) -> ModelOffer:
    return replace(made, aliases=aliases)


@st.composite
def entries(draw) -> str:
    """A model name or pattern: names, aliases, fragments, stars, under a profile or kind."""
    body = "".join(
        draw(
            st.lists(
                st.one_of(st.just("*"), st.sampled_from([*MODELS, *ALIASES, *FRAGMENTS])),
                min_size=1,
                max_size=3,
            )
        )
    )
    if body.count("*") > 4:
        body = body.replace("*", "", body.count("*") - 4)
    prefix = draw(
        st.sampled_from(
            ["", "", "p-open/", "p-anth/", "openai/", "anthropic/", "openrouter/", "p-router/"]
        )
    )
    return prefix + body


entry_lists = st.lists(entries(), max_size=4)


@st.composite
def policies(draw):
    key_names = draw(entry_lists)
    key_groups = draw(st.lists(st.lists(entries(), min_size=1, max_size=3), max_size=2))
    group_groups = draw(st.lists(st.lists(entries(), min_size=1, max_size=3), max_size=2))
    return key_names, key_groups, group_groups


def oracle_matches(entries_: list[str], o: ModelOffer, catalog: Catalog) -> bool:
    """The rule as the docstring says it, the slow way."""
    aliases = [a for a in o.aliases if catalog.model_by_alias.get(a) == o.name]
    forms = [o.profile.name, o.profile.kind]
    names = [o.name, *(f"{p}/{o.name}" for p in forms)]
    alias_names = [*aliases, *(f"{p}/{a}" for p in forms for a in aliases)]
    for e in entries_:
        if "*" in e:
            if any(fnmatch.fnmatchcase(n, e) for n in names):
                return True
        elif e in names or e in alias_names:
            return True
    return False


def oracle_permits(policy_parts, o: ModelOffer, catalog: Catalog) -> bool:
    key_names, key_groups, group_groups = policy_parts
    key_side = [*key_names, *(e for g in key_groups for e in g)]
    key_ok = (not key_names and not key_groups) or oracle_matches(key_side, o, catalog)
    bound = [e for g in group_groups for e in g]
    group_ok = not group_groups or oracle_matches(bound, o, catalog)
    return key_ok and group_ok


def enforced(name: str, who, catalog: Catalog) -> tuple[ModelOffer, ...] | None:
    """Return the offers a request for `name` is served by, or None when refused LM-1003."""
    try:
        return tuple(offers_for(name, who, catalog))
    except Forbidden:
        return None


@settings(max_examples=400, deadline=None)
@given(world=worlds(), parts=policies())
def test_listed_is_exactly_what_enforcement_allows(world, parts):
    catalog = world.catalog
    key_names, key_groups, group_groups = parts
    who = principal(
        access=policy_of(key_names=key_names, key_groups=key_groups, group_groups=group_groups)
    )
    listed = listed_models(who.access, catalog)
    names = [*catalog.model_names(), *catalog.aliases()]
    for name in names:
        served = enforced(name, who, catalog)
        assert (name in listed) == (served is not None), name
        expected = {id(o) for o in catalog.resolve(name) if oracle_permits(parts, o, catalog)}
        assert {id(o) for o in served or ()} == expected, name
    # A pinned request is allowed exactly when that offer is, and then its model is listed.
    for o in world.offers:
        pinned = f"{o.profile.name}/{o.name}"
        if catalog.resolve(pinned) != (o,):
            continue  # a canonical name with a slash shadows this pin
        served = enforced(pinned, who, catalog)
        assert (served is not None) == oracle_permits(parts, o, catalog), pinned
        if served is not None:
            assert o.name in listed


@settings(max_examples=500, deadline=None)
@given(
    pattern=st.text(alphabet="ab*", min_size=1, max_size=12),
    name=st.text(alphabet="ab/", max_size=14),
)
def test_a_pattern_matches_as_fnmatch_does_with_only_the_star_special(pattern, name):
    pieces = tuple(pattern.split("*"))
    if len(pieces) < 2:
        return
    assert glob_match(pieces, name) == fnmatch.fnmatchcase(name, pattern)


def test_a_key_with_no_names_and_no_access_groups_is_unrestricted():
    assert policy_of().unrestricted
    assert not policy_of(key_groups=[[]]).unrestricted  # an empty group assigned permits none


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("", "an entry is a non-empty string"),
        (
            "gpt 4o",
            "'gpt 4o' has a character outside letters, digits and . _ : @ + / - * "
            "(only * is a wildcard)",
        ),
        (
            "gpt-[4]o",
            "'gpt-[4]o' has a character outside letters, digits and . _ : @ + / - * "
            "(only * is a wildcard)",
        ),
        ("a*b*c*d*e*f", "'a*b*c*d*e*f' has more than 4 '*'"),
        ("anthropic/", "'anthropic/' has an empty part around '/'"),
        ("x" * 201, "'" + "x" * 40 + "…' is over 200 characters"),
    ],
)
def test_a_bad_entry_is_refused_with_what_is_wrong(entry, problem):
    assert entry_problem(entry) == problem


def test_too_many_entries_are_refused_and_repeats_dropped():
    with pytest.raises(BadEntry) as refused:
        clean_entries([f"m{i}" for i in range(101)])
    assert str(refused.value) == "At most 100 model entries are allowed; got 101."
    assert clean_entries(["gpt-*", "o1", "gpt-*"]) == ["gpt-*", "o1"]
