"""The profiles JSON (PROVIDER_PROFILES_JSON): its fields, the rules a profile and its
models must meet (the admin's forms check the same ones), and its bootstrap into the
database."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from audit.actors import Actor
from core.money import PRICE_FIELDS, UNSET_IS_INPUT_PRICE
from providers.models import (
    EMBEDDING_KINDS,
    MODERATION_KINDS,
    WEB_KINDS,
    KeyStrategy,
    ModelKind,
    PlatformKey,
    ProviderKind,
    ProviderModel,
    ProviderProfile,
)
from providers.response_cache import CACHE_FIELDS, cache_fields, cache_fields_problem
from providers.services import (
    OWN_KEY_LABEL,
    key_from_env,
    platform_key_recorded,
    platform_key_state,
    profile_changed,
    profile_recorded,
    profile_snapshot,
)

PROFILE_FIELDS = {
    "name",
    "kind",
    "base_url",
    "api_key_env",
    "allows_platform",
    "timeout_s",
    "stream_idle_timeout_s",
    "enabled",
    "passthrough",
    "models",
    "units",
    "respect_robots",
    "key_strategy",
    "api_version",
    "region",
    "project",
    "platform_keys",
}
# A platform key in the profiles JSON: read from an environment variable (a sealed one is
# added in the admin or with platform_key_add).
PLATFORM_KEY_FIELDS = {"label", "api_key_env", "weight", "rpm", "tpm", "enabled"}
# Vendor options: short strings, each read by the vendors that need it (models.py).
VENDOR_OPTIONS = ("api_version", "region", "project")
MODEL_FIELDS = {
    "name",
    "kind",
    "upstream",
    *PRICE_FIELDS,
    "max_output_tokens",
    "aliases",
    *CACHE_FIELDS,
}
# Web units in the profile JSON ("units": {"page": micro-USD, ...}) and their columns.
UNIT_COLUMNS = {
    "page": "page_micro",
    "rendered_page": "rendered_page_micro",
    "query": "query_micro",
}
# The unit each web kind sells (a fake profile may sell any).
KIND_UNIT: dict[str, str] = {
    ProviderKind.DIRECT_HTTP: "page",
    ProviderKind.RENDER_API: "rendered_page",
    ProviderKind.SEARCH_API: "query",
}


def read_profiles_spec(raw: str) -> list[dict]:
    """Parse PROVIDER_PROFILES_JSON: inline JSON, or a path to a JSON file."""
    text = raw.strip()
    if not text.startswith("["):
        path = Path(text)
        if not path.is_file():
            raise ImproperlyConfigured(
                "Malformed setting PROVIDER_PROFILES_JSON: neither a JSON list nor a file path."
            )
        text = path.read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"Malformed setting PROVIDER_PROFILES_JSON: {exc}") from None
    if not isinstance(spec, list):
        raise ImproperlyConfigured("Malformed setting PROVIDER_PROFILES_JSON: expected a list.")
    check_profiles_spec(spec)
    return spec


def check_profiles_spec(spec: list) -> None:
    """Refuse a malformed profiles spec (ImproperlyConfigured naming the first problem)."""
    for index, item in enumerate(spec):
        _check_profile(item, index)


def alias_problem(alias: object) -> str | None:
    """Say what makes `alias` unusable as a model alias, or return None."""
    if not isinstance(alias, str) or not alias.strip():
        return "an alias must be a non-empty string"
    if alias != alias.strip():
        return f"alias {alias!r} has surrounding spaces"
    if "," in alias:  # "a,b" is a route list: such a name could never be asked for
        return f"alias {alias!r} has a comma"
    return None


def model_kind_problem(model_kind: object, profile_kind: object) -> str | None:
    """Say what makes a model kind unusable on a profile of this kind, or return None."""
    if profile_kind in WEB_KINDS:
        return f"a {profile_kind} profile serves web units, not models"
    if model_kind not in ModelKind.values:
        return f"'kind' must be one of {sorted(ModelKind.values)}"
    if model_kind == ModelKind.EMBEDDING and profile_kind not in EMBEDDING_KINDS:
        return f"a {profile_kind} profile serves no embedding models"
    if model_kind == ModelKind.MODERATION and profile_kind not in MODERATION_KINDS:
        return f"a {profile_kind} profile serves no moderation models"
    return None


def units_problem(units: object, profile_kind: object, *, has_models: bool) -> str | None:
    """Say what makes a profile's web unit prices unusable for its kind, or return None."""
    if units is None:
        units = {}
    if not isinstance(units, dict):
        return "'units' must be an object of unit -> micro-USD"
    for unit, price in units.items():
        if unit not in UNIT_COLUMNS:
            return f"unknown unit {unit!r} (use {sorted(UNIT_COLUMNS)})"
        if not isinstance(price, int) or isinstance(price, bool) or price < 0:
            return f"the price of {unit!r} must be a non-negative integer (micro-USD)"
    if isinstance(profile_kind, str) and profile_kind in WEB_KINDS:
        if has_models:
            return f"a {profile_kind} profile serves web units, not models"
        own = KIND_UNIT[profile_kind]
        if set(units) - {own}:
            return f"a {profile_kind} profile sells only {own!r} units"
        if own not in units and profile_kind != ProviderKind.DIRECT_HTTP:
            return f"a {profile_kind} profile needs the price of its {own!r} unit"
    elif units and profile_kind != ProviderKind.FAKE:
        return f"a {profile_kind} profile sells no web units"
    return None


def platform_keys_problem(keys: object) -> str | None:
    """Say what makes a profile's JSON platform keys unusable, or return None."""
    if keys is None:
        return None
    if not isinstance(keys, list):
        return "'platform_keys' must be a list"
    labels = set()
    for key in keys:
        if not isinstance(key, dict) or set(key) - PLATFORM_KEY_FIELDS:
            return f"a platform key is an object of {sorted(PLATFORM_KEY_FIELDS)}"
        label = key.get("label")
        if not isinstance(label, str) or not label or label == OWN_KEY_LABEL or label in labels:
            return f"platform key label {label!r} is missing, repeated or reserved"
        labels.add(label)
        if not isinstance(key.get("api_key_env"), str) or not key["api_key_env"]:
            return f"platform key {label!r} needs 'api_key_env'"
        for limit in ("weight", "rpm", "tpm"):
            value = key.get(limit)
            if value is not None and (type(value) is not int or value < (limit == "weight")):
                return f"platform key {label!r}: {limit!r} must be a non-negative integer"
    return None


def alias_clash(models: list[tuple[str, list[str]]]) -> str | None:
    """Return the first alias that is also a model name or another alias of the same
    profile (a model's own name included), or None."""
    names = {name for name, _ in models}
    seen: set[str] = set()
    for _, aliases in models:
        for alias in aliases:
            if alias in names or alias in seen:
                return alias
            seen.add(alias)
    return None


def _check_profile(item: object, index: int) -> None:
    where = f"PROVIDER_PROFILES_JSON[{index}]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ImproperlyConfigured(f"Malformed setting {where}: needs a 'name'.")
    unknown = set(item) - PROFILE_FIELDS
    if unknown:
        raise ImproperlyConfigured(
            f"Malformed setting {where}: unknown field {sorted(unknown)[0]}."
        )
    if item.get("kind") not in ProviderKind.values:
        raise ImproperlyConfigured(f"Malformed setting {where}: unknown kind {item.get('kind')!r}.")
    if not isinstance(item.get("passthrough", False), bool):
        raise ImproperlyConfigured(
            f"Malformed setting {where}: 'passthrough' must be true or false."
        )
    has_models = bool(item.get("models"))
    problem = units_problem(item.get("units"), item.get("kind"), has_models=has_models)
    if problem:
        raise ImproperlyConfigured(f"Malformed setting {where}: {problem}.")
    if not isinstance(item.get("respect_robots", True), bool):
        raise ImproperlyConfigured(
            f"Malformed setting {where}: 'respect_robots' must be true or false."
        )
    if item.get("key_strategy", KeyStrategy.ROUND_ROBIN) not in KeyStrategy.values:
        raise ImproperlyConfigured(
            f"Malformed setting {where}: 'key_strategy' must be one of "
            f"{sorted(KeyStrategy.values)}."
        )
    problem = platform_keys_problem(item.get("platform_keys"))
    if problem:
        raise ImproperlyConfigured(f"Malformed setting {where}: {problem}.")
    for option in VENDOR_OPTIONS:
        value = item.get(option, "")
        if not isinstance(value, str) or len(value) > 32 or value != value.strip():
            raise ImproperlyConfigured(
                f"Malformed setting {where}: {option!r} must be a string of at most 32 "
                "characters, without surrounding spaces."
            )
    names = []
    for m_index, model in enumerate(item.get("models") or []):
        m_where = f"{where}.models[{m_index}]"
        if not isinstance(model, dict) or not isinstance(model.get("name"), str):
            raise ImproperlyConfigured(f"Malformed setting {m_where}: needs a name.")
        if set(model) - MODEL_FIELDS:
            bad = sorted(set(model) - MODEL_FIELDS)[0]
            raise ImproperlyConfigured(f"Malformed setting {m_where}: unknown field {bad}.")
        problem = model_kind_problem(model.get("kind", ModelKind.CHAT), item.get("kind"))
        if problem:
            raise ImproperlyConfigured(f"Malformed setting {m_where}: {problem}.")
        # Absent or null: the model's input price.
        for price in UNSET_IS_INPUT_PRICE:
            value = model.get(price)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ImproperlyConfigured(
                    f"Malformed setting {m_where}: {price!r} must be a non-negative integer "
                    "(micro-USD per million tokens) or absent."
                )
        problem = cache_fields_problem(model)
        if problem:
            raise ImproperlyConfigured(f"Malformed setting {m_where}: {problem}.")
        aliases = model.get("aliases", [])
        if not isinstance(aliases, list):
            raise ImproperlyConfigured(
                f"Malformed setting {m_where}: 'aliases' must be a list of names."
            )
        for alias in aliases:
            problem = alias_problem(alias)
            if problem:
                raise ImproperlyConfigured(f"Malformed setting {m_where}: {problem}.")
        names.append((model["name"], aliases))
    clash = alias_clash(names)
    if clash is not None:
        raise ImproperlyConfigured(
            f"Malformed setting {where}: alias {clash!r} is already a model name or alias "
            "of this profile."
        )


def _bootstrap_platform_keys(
    profile: ProviderProfile, keys: list[dict], *, actor: Actor | None
) -> None:
    """Create or update the JSON's platform keys; drop the environment keys it no longer
    lists (sealed ones, added by an operator, stay); each change recorded."""
    befores = {k.label: (k, platform_key_state(k)) for k in profile.platform_keys.all()}
    listed = {key["label"] for key in keys}
    for label, (old, state) in befores.items():
        if label not in listed and old.api_key_env:
            platform_key_recorded(old, action="platformkey.delete", actor=actor, before=state)
            old.delete()
    for key in keys:
        row, created = PlatformKey.objects.update_or_create(
            profile=profile,
            label=key["label"],
            defaults={
                "api_key_env": key["api_key_env"],
                "weight": key.get("weight", 1),
                "rpm": key.get("rpm"),
                "tpm": key.get("tpm"),
                "enabled": key.get("enabled", True),
            },
        )
        before = None if created else befores[row.label][1]
        if created:
            platform_key_recorded(row, action="platformkey.add", actor=actor)
        elif before != platform_key_state(row):
            platform_key_recorded(row, action="platformkey.update", actor=actor, before=before)


def unit_prices(item: dict) -> dict[str, int | None]:
    """Return a profile's unit price columns from its JSON (a direct fetch defaults to free)."""
    units = item.get("units") or {}
    prices = {column: units.get(unit) for unit, column in UNIT_COLUMNS.items()}
    if item["kind"] == ProviderKind.DIRECT_HTTP and prices["page_micro"] is None:
        prices["page_micro"] = 0
    return prices


def price_columns(model: dict) -> dict[str, int | None]:
    """Return a model's price columns from its JSON: a price absent is 0, except those left
    unset to mean the input price (null)."""
    return {
        name: model.get(name) if name in UNSET_IS_INPUT_PRICE else int(model.get(name, 0))
        for name in PRICE_FIELDS
    }


@transaction.atomic
def profiles_bootstrap(*, spec: list[dict], actor: Actor | None = None) -> list[ProviderProfile]:
    """Create or update profiles and their models from the JSON contract (idempotent); each
    profile created or changed is recorded in the trail."""
    check_profiles_spec(spec)
    profiles = []
    for item in spec:
        existing = ProviderProfile.objects.filter(name=item["name"]).values_list("pk", flat=True)
        before = profile_snapshot(existing.first())
        defaults = {
            "kind": item["kind"],
            "base_url": item.get("base_url", ""),
            "api_key_env": item.get("api_key_env", ""),
            "allows_platform": item.get("allows_platform", True),
            "timeout_s": item.get("timeout_s", 60),
            "stream_idle_timeout_s": item.get("stream_idle_timeout_s", 30),
            "enabled": item.get("enabled", True),
            "passthrough": item.get("passthrough", False),
            "respect_robots": item.get("respect_robots", True),
            "key_strategy": item.get("key_strategy", KeyStrategy.ROUND_ROBIN),
            **{option: item.get(option, "") for option in VENDOR_OPTIONS},
            **unit_prices(item),
            "updated_at": timezone.now(),
        }
        profile, _ = ProviderProfile.objects.update_or_create(name=item["name"], defaults=defaults)
        env_key = key_from_env(profile.api_key_env) if profile.api_key_env else ""
        if env_key:
            profile.api_key_last4 = env_key[-4:]
            profile.save(update_fields=["api_key_last4"])
        names = []
        for model in item.get("models") or []:
            names.append(model["name"])
            ProviderModel.objects.update_or_create(
                profile=profile,
                name=model["name"],
                defaults={
                    "kind": model.get("kind", ModelKind.CHAT),
                    "upstream": model.get("upstream") or model["name"],
                    **price_columns(model),
                    "max_output_tokens": int(model.get("max_output_tokens", 4096)),
                    "aliases": list(model.get("aliases") or []),
                    **cache_fields(model),
                },
            )
        profile.models.exclude(name__in=names).delete()
        if "platform_keys" in item:
            _bootstrap_platform_keys(profile, item["platform_keys"], actor=actor)
        profile_recorded(profile=profile, before=before, actor=actor)
        profiles.append(profile)
    transaction.on_commit(profile_changed)
    return profiles
