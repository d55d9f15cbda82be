"""Model access groups: their writes and reads, and a key's compiled policy.

The rule itself (how entries match and combine) is accounts/model_access.py. Every write here
is audited and, once committed, tells every gateway replica before it returns: a change to
an access group drops every cached key of its account (it may be assigned anywhere in it),
an assignment drops the key or the group's keys.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from accounts.model_access import ACCESS_GROUPS_MAX, AccessPolicy, clean_entries, policy_of
from accounts.models import AccessGroup, Account, ApiKey, Group
from accounts.services import account_changed, api_key_changed, group_changed
from audit import services as audit
from audit.actors import Actor

AUDITED = ("name", "description", "entries")


class AccessGroupInUse(ValueError):
    """A write the rule refuses: an access group of another account, or too many."""


def access_groups_of_user(*, user: User) -> QuerySet[AccessGroup]:
    return AccessGroup.objects.filter(account__memberships__user=user).order_by("id")


def access_groups_of_account(*, account: Account) -> QuerySet[AccessGroup]:
    return AccessGroup.objects.filter(account=account).order_by("name")


def _audited(access_group: AccessGroup) -> dict:
    return {name: getattr(access_group, name) for name in AUDITED}


def audited_with_assignments(access_group: AccessGroup) -> dict:
    """Return what the trail records of an access group: its fields, and its keys (by
    prefix) and groups (by name)."""
    return {
        **_audited(access_group),
        "keys": sorted(access_group.keys.values_list("prefix", flat=True)),
        "groups": sorted(access_group.groups.values_list("name", flat=True)),
    }


def record_admin_save(access_group: AccessGroup, *, before: dict | None, actor: Actor) -> None:
    """Record an operator's save of an access group with its assignments (created when
    `before` is None), then tell every replica."""
    target: audit.Target = {
        "actor": actor,
        "account_id": access_group.account_id,
        "target_type": "access_group",
        "target_id": access_group.pk,
        "target_label": access_group.name,
    }
    after = audited_with_assignments(access_group)
    if before is None:
        audit.record(action="access_group.create", after=after, **target)
    else:
        audit.record_change(action="access_group.update", before=before, after=after, **target)
    account_changed(account_id=access_group.account_id)


def access_group_create(
    *,
    account: Account,
    name: str,
    entries: list[str],
    description: str = "",
    actor: Actor | None = None,
) -> AccessGroup:
    """Create an access group (assigned to nothing yet, so no replica needs telling)."""
    access_group = AccessGroup(
        account=account, name=name, description=description, entries=clean_entries(entries)
    )
    access_group.full_clean(exclude=["account"])
    with transaction.atomic():
        access_group.save()
        audit.record(
            actor=actor,
            action="access_group.create",
            account_id=account.pk,
            target_type="access_group",
            target_id=access_group.pk,
            target_label=access_group.name,
            after=_audited(access_group),
        )
    return access_group


def access_group_update(
    *, access_group: AccessGroup, actor: Actor | None = None, **fields: object
) -> AccessGroup:
    """Change an access group's name, description or entries; live on every replica when
    this returns."""
    before = _audited(access_group)
    if "entries" in fields:
        fields["entries"] = clean_entries(fields["entries"])
    for name, value in fields.items():
        setattr(access_group, name, value)
    access_group.full_clean(exclude=["account"])
    with transaction.atomic():
        access_group.save(update_fields=[*fields] or None)
        audit.record_change(
            actor=actor,
            action="access_group.update",
            account_id=access_group.account_id,
            target_type="access_group",
            target_id=access_group.pk,
            target_label=access_group.name,
            before=before,
            after=_audited(access_group),
        )
    account_changed(account_id=access_group.account_id)
    return access_group


def access_group_delete(*, access_group: AccessGroup, actor: Actor | None = None) -> None:
    """Delete an access group (its assignments go with it); live on every replica when this
    returns. A key that had only this group and no names of its own is unrestricted after."""
    account_id = access_group.account_id
    with transaction.atomic():
        audit.record(
            actor=actor,
            action="access_group.delete",
            account_id=account_id,
            target_type="access_group",
            target_id=access_group.pk,
            target_label=access_group.name,
            before=audited_with_assignments(access_group),
        )
        access_group.delete()
    account_changed(account_id=account_id)


def _checked(account_id: int, access_groups: Iterable[AccessGroup]) -> list[AccessGroup]:
    chosen = list({g.pk: g for g in access_groups}.values())
    if any(g.account_id != account_id for g in chosen):
        raise AccessGroupInUse("An access group of another account cannot be assigned.")
    if len(chosen) > ACCESS_GROUPS_MAX:
        raise AccessGroupInUse(f"At most {ACCESS_GROUPS_MAX} access groups may be assigned.")
    return sorted(chosen, key=lambda g: g.name)


def _assign(
    row: ApiKey | Group,
    *,
    account_id: int,
    access_groups: Iterable[AccessGroup],
    actor: Actor | None,
    action: str,
    target_type: str,
    target_label: str,
) -> bool:
    """Set exactly these access groups on a key or group, recorded; say whether they changed
    (the caller then tells every replica)."""
    chosen = _checked(account_id, access_groups)
    before = sorted(row.access_groups.values_list("name", flat=True))
    after = [g.name for g in chosen]
    if before == after:
        return False
    with transaction.atomic():
        row.access_groups.set(chosen)
        audit.record(
            actor=actor,
            action=action,
            account_id=account_id,
            target_type=target_type,
            target_id=row.pk,
            target_label=target_label,
            before={"access_groups": before},
            after={"access_groups": after},
        )
    return True


def key_access_groups_set(
    *, api_key: ApiKey, access_groups: Iterable[AccessGroup], actor: Actor | None = None
) -> ApiKey:
    """Assign exactly these access groups to a key (AccessGroupInUse for another account's);
    live on every replica when this returns."""
    label = f"{api_key.prefix}… {api_key.name}".strip()
    if _assign(
        api_key,
        account_id=api_key.group.account_id,
        access_groups=access_groups,
        actor=actor,
        action="key.access_groups",
        target_type="key",
        target_label=label,
    ):
        api_key_changed(api_key=api_key)
    return api_key


def group_access_groups_set(
    *, group: Group, access_groups: Iterable[AccessGroup], actor: Actor | None = None
) -> Group:
    """Bound a budget group's keys by exactly these access groups (none: unbounded); live on
    every replica when this returns."""
    if _assign(
        group,
        account_id=group.account_id,
        access_groups=access_groups,
        actor=actor,
        action="group.access_groups",
        target_type="group",
        target_label=group.name,
    ):
        group_changed(group=group)
    return group


def policy_for_key(api_key: ApiKey) -> AccessPolicy:
    """Return the key's compiled policy: its names, its access groups' entries and its
    group's (one query for both sides)."""
    keys_through = AccessGroup.keys.through.objects
    groups_through = AccessGroup.groups.through.objects
    rows = (
        AccessGroup.objects.annotate(
            own=Exists(keys_through.filter(accessgroup_id=OuterRef("pk"), apikey_id=api_key.pk)),
            bounds=Exists(
                groups_through.filter(accessgroup_id=OuterRef("pk"), group_id=api_key.group_id)
            ),
        )
        .filter(Q(own=True) | Q(bounds=True))
        .values_list("entries", "own", "bounds")
    )
    own, bound = [], []
    for entries, is_own, bounds in rows:
        if is_own:
            own.append(entries)
        if bounds:
            bound.append(entries)
    return policy_of(key_names=api_key.allowed_models or (), key_groups=own, group_groups=bound)


def policy_for_group(group: Group) -> AccessPolicy:
    """Return the policy of a service acting for a group (internal routes): its bound only."""
    bound = AccessGroup.objects.filter(groups=group).values_list("entries", flat=True)
    return policy_of(group_groups=list(bound))
