"""Writes of team keys: pools, fallback flags, sealed keys, deletion with fleet-wide eviction."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from accounts.models import Group
from audit import services as audit
from audit.actors import Actor
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
            f"Provider {provider!r} is of kind {profile.kind}, which only the platform serves; "
            f"team keys are not allowed for it. {eligible_providers_hint()}"
        )
    return profile


def _pools_changed(**payload) -> None:
    # Returns once every replica has reloaded the group's pools: the next request anywhere
    # is served by the keys as they are now (an added key, a removed one, a fallback flag).
    bus.publish(bus.Topic.POOL, payload, wait=True)


def pool_label(group: Group, provider: str) -> str:
    return f"{group.name} · {provider}"


def key_label(team_key: TeamKey) -> str:
    return f"{team_key.label} (…{team_key.last4})"


@transaction.atomic
def pool_set_fallback(
    *, group: Group, provider: str, fallback: bool, actor: Actor | None = None
) -> KeyPool:
    """Set a pool's fallback flag (creating the pool). Turning it on is the account's consent
    to pay platform prices when its team keys cannot serve: the trail records it as such."""
    eligible_provider(provider)
    pool, created = KeyPool.objects.select_for_update().get_or_create(
        group=group, provider=provider
    )
    was = None if created else pool.fallback
    pool.fallback = fallback
    pool.updated_at = timezone.now()
    pool.save(update_fields=["fallback", "updated_at"])
    if was != fallback:
        audit.record(
            actor=actor,
            action="pool.fallback.enable" if fallback else "pool.fallback.disable",
            account_id=group.account_id,
            target_type="pool",
            target_id=pool.pk,
            target_label=pool_label(group, provider),
            before={"fallback": was},
            after={"fallback": fallback},
            consent=(
                audit.FALLBACK_CONSENT.format(provider=provider, group=group.name)
                if fallback
                else ""
            ),
        )
    transaction.on_commit(lambda: _pools_changed(group_id=group.pk))
    return pool


@transaction.atomic
def team_key_add(
    *, group: Group, provider: str, label: str, key: str, actor: Actor | None = None
) -> TeamKey:
    """Seal and store a team key (at most 10 per pool); the key itself is never returned."""
    label = (label or "").strip()
    if not 1 <= len(label) <= LABEL_MAX_CHARS:
        raise TeamKeyRefused(f"A label needs 1 to {LABEL_MAX_CHARS} characters.")
    if not isinstance(key, str) or not key.strip() or len(key) > 512:
        raise TeamKeyRefused("A key must be a non-empty string of at most 512 characters.")
    key = key.strip()
    eligible_provider(provider)
    pool, created = KeyPool.objects.select_for_update().get_or_create(
        group=group, provider=provider
    )
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
    after: dict[str, object] = {"label": label, "last4": team_key.last4, "provider": provider}
    if created:  # a new pool starts with platform fallback off
        after["pool_fallback"] = False
    audit.record(
        actor=actor,
        action="teamkey.add",
        account_id=group.account_id,
        target_type="teamkey",
        target_id=team_key.pk,
        target_label=f"{key_label(team_key)} in {pool_label(group, provider)}",
        after=after,
    )
    transaction.on_commit(lambda: _pools_changed(group_id=group.pk))
    return team_key


class LastTeamKey(TeamKeyRefused):
    """The pool's last key, asked to be kept: a change that asks first (the dashboard) was
    not confirmed."""


def team_key_delete(
    *, team_key: TeamKey, actor: Actor | None = None, keep_last: bool = False
) -> None:
    """Delete a key and evict it from every replica's memory before returning. `keep_last`:
    refuse (LastTeamKey) when it is its pool's last key, decided under the pool's lock so two
    removals at once cannot empty a pool unasked."""
    key_id = team_key.pk
    pool = team_key.pool
    with transaction.atomic():
        KeyPool.objects.select_for_update().filter(pk=pool.pk).first()  # the pool's lock
        others = TeamKey.objects.filter(pool_id=pool.pk).exclude(pk=key_id)
        if keep_last and not others.exists():
            raise LastTeamKey(f"{key_label(team_key)} is the last key of its pool.")
        if TeamKey.objects.filter(pk=key_id).delete()[0]:
            audit.record(
                actor=actor,
                action="teamkey.delete",
                account_id=pool.group.account_id,
                target_type="teamkey",
                target_id=key_id,
                target_label=f"{key_label(team_key)} in {pool_label(pool.group, pool.provider)}",
                before={
                    "label": team_key.label,
                    "last4": team_key.last4,
                    "provider": pool.provider,
                },
            )
    _pools_changed(evict_key_id=key_id)


def pool_delete(*, pool: KeyPool, actor: Actor | None = None) -> None:
    """Remove a group's pool for a provider with its keys: the group's requests for it go to
    the platform's keys again (as with no pool). Evicted from every replica before returning."""
    with transaction.atomic():
        keys = [key_label(k) for k in TeamKey.objects.filter(pool_id=pool.pk).order_by("id")]
        # Its keys go with it (on_delete CASCADE).
        if KeyPool.objects.filter(pk=pool.pk).delete()[0]:
            audit.record(
                actor=actor,
                action="pool.delete",
                account_id=pool.group.account_id,
                target_type="pool",
                target_id=pool.pk,
                target_label=pool_label(pool.group, pool.provider),
                before={"provider": pool.provider, "fallback": pool.fallback, "keys": keys},
            )
    _pools_changed(group_id=pool.group_id)


def team_keys_reseal(*, batch: int = 100, actor: Actor | None = None) -> int:
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
                    TeamKey.objects.select_for_update(of=("self",))
                    .select_related("pool__group")
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
                was = team_key.seal_version
                team_key.sealed, team_key.seal_version = seal(plain, bound_to=binding)
                team_key.save(update_fields=["sealed", "seal_version"])
                audit.record(
                    actor=actor,
                    action="teamkey.reseal",
                    account_id=team_key.pool.group.account_id,
                    target_type="teamkey",
                    target_id=team_key.pk,
                    target_label=key_label(team_key),
                    before={"seal_version": was},
                    after={"seal_version": team_key.seal_version},
                )
                done += 1
