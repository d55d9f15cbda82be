"""Writes of team keys: pools, fallback flags, sealed keys, deletion with fleet-wide eviction."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from accounts.models import Group
from byok.models import LABEL_MAX_CHARS, MAX_KEYS_PER_POOL, KeyPool, TeamKey
from byok.pools import key_binding
from byok.selectors import eligible_providers_hint
from core import bus
from core.sealing import keyring, seal, unseal
from providers.models import TEAM_KEY_ELIGIBLE_KINDS, ProviderProfile

log = logging.getLogger(__name__)


class TeamKeyRefused(Exception):
    """A team key request breaks a rule; `conflict` marks limits (409) versus bad input (400)."""

    def __init__(self, message: str, *, conflict: bool = False) -> None:
        super().__init__(message)
        self.conflict = conflict


def eligible_provider(provider: str) -> ProviderProfile:
    """Return the live, enabled profile a team key may use, or refuse."""
    profile = ProviderProfile.objects.filter(name=provider, enabled=True).first()
    if profile is None:
        raise TeamKeyRefused(f"Unknown provider {provider!r}. {eligible_providers_hint()}")
    if profile.kind not in TEAM_KEY_ELIGIBLE_KINDS:
        raise TeamKeyRefused(
            f"Provider {provider!r} is of kind {profile.kind}, which does not take a plain API "
            f"key on the vendor URL; team keys are not allowed for it. {eligible_providers_hint()}"
        )
    return profile


def _pools_changed(**payload) -> None:
    # Returns once every replica has reloaded the group's pools: the next request anywhere
    # is served by the keys as they are now (an added key, a removed one, a fallback flag).
    bus.publish(bus.Topic.POOL, payload, wait=True)


@transaction.atomic
def pool_set_fallback(*, group: Group, provider: str, fallback: bool) -> KeyPool:
    eligible_provider(provider)
    pool, _ = KeyPool.objects.select_for_update().get_or_create(group=group, provider=provider)
    pool.fallback = fallback
    pool.updated_at = timezone.now()
    pool.save(update_fields=["fallback", "updated_at"])
    transaction.on_commit(lambda: _pools_changed(group_id=group.pk))
    return pool


@transaction.atomic
def team_key_add(*, group: Group, provider: str, label: str, key: str) -> TeamKey:
    """Seal and store a team key (at most 10 per pool); the key itself is never returned."""
    label = (label or "").strip()
    if not 1 <= len(label) <= LABEL_MAX_CHARS:
        raise TeamKeyRefused(f"A label needs 1 to {LABEL_MAX_CHARS} characters.")
    if not isinstance(key, str) or not key.strip() or len(key) > 512:
        raise TeamKeyRefused("A key must be a non-empty string of at most 512 characters.")
    key = key.strip()
    eligible_provider(provider)
    pool, _ = KeyPool.objects.select_for_update().get_or_create(group=group, provider=provider)
    if pool.keys.count() >= MAX_KEYS_PER_POOL:
        raise TeamKeyRefused(
            f"The pool for {provider} already holds {MAX_KEYS_PER_POOL} keys.", conflict=True
        )
    team_key = TeamKey.objects.create(
        pool=pool, label=label, sealed=b"", seal_version="", last4=key[-4:]
    )
    team_key.sealed, team_key.seal_version = seal(
        key, bound_to=key_binding(group_id=group.pk, provider=provider, key_id=team_key.pk)
    )
    team_key.save(update_fields=["sealed", "seal_version"])
    transaction.on_commit(lambda: _pools_changed(group_id=group.pk))
    return team_key


def team_key_delete(*, team_key: TeamKey) -> None:
    """Delete a key and evict it from every replica's memory before returning."""
    key_id = team_key.pk
    with transaction.atomic():
        TeamKey.objects.filter(pk=key_id).delete()
    _pools_changed(evict_key_id=key_id)


def pool_delete(*, pool: KeyPool) -> None:
    """Remove a group's pool for a provider with its keys: the group's requests for it go to
    the platform's keys again (as with no pool). Evicted from every replica before returning."""
    KeyPool.objects.filter(pk=pool.pk).delete()  # its keys with it (on_delete CASCADE)
    _pools_changed(group_id=pool.group_id)


def team_keys_reseal(*, batch: int = 100) -> int:
    """Re-seal every key not under the newest master key; safe to interrupt and re-run."""
    newest = keyring().newest
    done = 0
    while True:
        ids = list(
            TeamKey.objects.exclude(seal_version=newest).values_list("pk", flat=True)[:batch]
        )
        if not ids:
            return done
        for key_id in ids:
            with transaction.atomic():
                team_key = (
                    TeamKey.objects.select_for_update()
                    .select_related("pool")
                    .filter(pk=key_id)
                    .first()
                )
                if team_key is None or team_key.seal_version == newest:
                    continue
                binding = key_binding(
                    group_id=team_key.pool.group_id,
                    provider=team_key.pool.provider,
                    key_id=team_key.pk,
                )
                plain = unseal(team_key.sealed, version=team_key.seal_version, bound_to=binding)
                team_key.sealed, team_key.seal_version = seal(plain, bound_to=binding)
                team_key.save(update_fields=["sealed", "seal_version"])
                done += 1
