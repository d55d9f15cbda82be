"""Writes of provider config: profiles and models on the audit trail, platform credentials
(sealed or named), and the reload every replica is told of. Bootstrap from the profiles JSON
is in providers/spec.py."""

from __future__ import annotations

import os

from django.db import transaction
from django.utils import timezone

from audit import services as audit
from audit.actors import Actor
from core import bus
from core.money import PRICE_FIELDS
from core.sealing import seal
from providers.models import PlatformKey, ProviderProfile
from providers.response_cache import CACHE_FIELDS

# What the audit trail records of a profile and of each of its models: never the sealed key.
PROFILE_AUDITED = (
    "kind",
    "base_url",
    "api_key_env",
    "api_key_last4",
    "allows_platform",
    "enabled",
    "timeout_s",
    "stream_idle_timeout_s",
    "passthrough",
    "page_micro",
    "rendered_page_micro",
    "query_micro",
    "key_strategy",
    "api_version",
    "region",
    "project",
    "respect_robots",
)
MODEL_AUDITED = (
    "kind",
    "upstream",
    *PRICE_FIELDS,
    "max_output_tokens",
    "aliases",
    *CACHE_FIELDS,
)


def profile_snapshot(profile_id: int | None) -> dict | None:
    """A stored profile as the trail records it, its models by name; None if there is none."""
    profile = ProviderProfile.objects.filter(pk=profile_id).first() if profile_id else None
    if profile is None:
        return None
    models = {
        model.name: {name: getattr(model, name) for name in MODEL_AUDITED}
        for model in profile.models.order_by("name")
    }
    return {**{name: getattr(profile, name) for name in PROFILE_AUDITED}, "models": models}


def profile_recorded(*, profile: ProviderProfile, before: dict | None, actor: Actor | None) -> None:
    """Record a profile created (before None) or changed since `before` (only what differs);
    operator-wide: a profile belongs to no account."""
    after = profile_snapshot(profile.pk) or {}
    target: audit.Target = {
        "actor": actor,
        "account_id": None,
        "target_type": "profile",
        "target_id": profile.pk,
        "target_label": profile.name,
    }
    if before is None:
        audit.record(**target, action="profile.create", after=after)
    else:
        audit.record_change(**target, action="profile.update", before=before, after=after)


def seal_platform_key(*, profile: ProviderProfile, api_key: str) -> None:
    """Seal a platform credential into the profile row (only its last 4 stay readable); the
    caller saves the row and records the change."""
    profile.api_key_sealed, profile.api_key_seal_version = seal(
        api_key, bound_to=profile.seal_binding
    )
    profile.api_key_last4 = api_key[-4:]


def key_from_env(names: str) -> str:
    """Return the platform key the environment holds for `api_key_env`: one variable's
    value, or several variables' (`A:B:C`) joined with colons, those unset left out (so
    `AWS_ACCESS_KEY_ID:AWS_SECRET_ACCESS_KEY:AWS_SESSION_TOKEN` is a Bedrock key, with or
    without a session token); "" when none is set."""
    return ":".join(filter(None, (os.environ.get(name, "") for name in names.split(":"))))


OWN_KEY_LABEL = "profile"  # the profile's own key, first in its pool (gateway/catalog.py)
PLATFORM_KEY_AUDITED = (
    "label",
    "api_key_env",
    "last4",
    "weight",
    "rpm",
    "tpm",
    "enabled",
    "status",
)


def platform_key_state(key: PlatformKey) -> dict:
    return {name: getattr(key, name) for name in PLATFORM_KEY_AUDITED}


def platform_key_recorded(
    key: PlatformKey,
    *,
    action: str,
    actor: Actor | None,
    before: dict | None = None,
    why: dict | None = None,
) -> None:
    """Record a platform key's change (its state after it, and `why` it changed, if said)."""
    audit.record(
        actor=actor,
        action=action,
        account_id=None,
        target_type="platform_key",
        target_id=key.pk,
        target_label=f"{key.profile.name}/{key.label}",
        before=before,
        after={**platform_key_state(key), **(why or {})}
        if action != "platformkey.delete"
        else None,
    )


@transaction.atomic
def platform_key_add(
    *,
    profile: ProviderProfile,
    label: str,
    api_key: str = "",
    api_key_env: str = "",
    weight: int = 1,
    rpm: int | None = None,
    tpm: int | None = None,
    actor: Actor | None = None,
) -> PlatformKey:
    """Add a platform key to a profile: sealed (only its last 4 stay readable), or read from
    an environment variable; recorded, and every replica reloads."""
    if bool(api_key) == bool(api_key_env):
        raise ValueError("a platform key is either a secret or an environment variable's name")
    if label == OWN_KEY_LABEL:
        raise ValueError(f"the label {OWN_KEY_LABEL!r} names the profile's own key")
    key = PlatformKey(
        profile=profile, label=label, api_key_env=api_key_env, weight=weight, rpm=rpm, tpm=tpm
    )
    if api_key:
        platform_key_seal(key=key, api_key=api_key)
    key.full_clean()
    key.save()
    platform_key_recorded(key, action="platformkey.add", actor=actor)
    transaction.on_commit(profile_changed)
    return key


def platform_key_seal(*, key: PlatformKey, api_key: str) -> None:
    """Seal a secret into a platform key row (the caller saves it)."""
    key.sealed, key.seal_version = seal(api_key, bound_to=key.seal_binding)
    key.last4 = api_key[-4:]


@transaction.atomic
def platform_key_failed(key_id: int, status: int) -> None:
    """The vendor refused a platform key (401 / 403): mark it failing, record it, reload."""
    key = (
        PlatformKey.objects.select_related("profile").select_for_update().filter(pk=key_id).first()
    )
    if key is None or key.status == PlatformKey.Status.FAILING:
        return
    before = platform_key_state(key)
    key.status = PlatformKey.Status.FAILING
    key.save(update_fields=["status"])
    platform_key_recorded(
        key, action="platformkey.failed", actor=None, before=before, why={"vendor_status": status}
    )
    transaction.on_commit(profile_changed)


def profile_set_platform_key(
    *, profile: ProviderProfile, api_key: str, actor: Actor | None = None
) -> None:
    """Seal a platform credential into the profile row (only its last 4 stay readable) and
    record it by its last 4 (the caller saves the row, in its transaction)."""
    was = profile.api_key_last4
    seal_platform_key(profile=profile, api_key=api_key)
    if profile.pk is not None and was != profile.api_key_last4:
        audit.record(
            actor=actor,
            action="profile.update",
            account_id=None,
            target_type="profile",
            target_id=profile.pk,
            target_label=profile.name,
            before={"api_key_last4": was},
            after={"api_key_last4": profile.api_key_last4},
        )


def profile_changed() -> None:
    """Tell every replica to reload its provider config."""
    bus.publish(bus.Topic.PROFILES, {"at": timezone.now().isoformat()})
