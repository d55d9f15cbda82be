"""SCIM Groups: the account's directory groups, whose names Account.directory_roles maps to
roles. A change of a group's members, name or existence re-computes its members' roles."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import DIRECTORY_GROUP_MAX, Account
from audit import services as audit
from audit.actors import Actor
from scim.errors import ScimError, invalid_value
from scim.models import ScimGroup
from scim.roles import roles_recompute
from scim.users import users_of_account


def clean(data: Any, *, account: Account) -> dict:
    """Check a Group's writable attributes; return them with members as user ids."""
    if not isinstance(data, dict):
        raise invalid_value("A Group is a JSON object.")
    lowered = {k.lower(): v for k, v in data.items()}
    name = lowered.get("displayname")
    if not isinstance(name, str) or not 0 < len(name) <= DIRECTORY_GROUP_MAX or "\x00" in name:
        raise invalid_value(f"displayName is required: 1 to {DIRECTORY_GROUP_MAX} characters.")
    external_id = lowered.get("externalid")
    if external_id is not None and (not isinstance(external_id, str) or len(external_id) > 255):
        raise invalid_value("externalId is a string of at most 255 characters.")
    ids = []
    for member in lowered.get("members") or []:
        value = member.get("value") if isinstance(member, dict) else None
        if not isinstance(value, str) or not value.isdigit() or len(value) > 18:
            raise invalid_value("Each member is an object whose value is a User's id.")
        ids.append(int(value))
    known = set(users_of_account(account).filter(pk__in=ids).values_list("pk", flat=True))
    if unknown := sorted(set(ids) - known):
        raise invalid_value(f"No User with id {unknown[0]} in this account.")
    return {"displayName": name, "externalId": external_id or "", "members": sorted(set(ids))}


def _audited(group: ScimGroup, member_ids: list[int]) -> dict:
    return {
        "displayName": group.display_name,
        "externalId": group.external_id,
        "members": member_ids,
    }


def _member_ids(group: ScimGroup) -> list[int]:
    return sorted(group.members.values_list("pk", flat=True))


def _save(group: ScimGroup) -> None:
    try:
        with transaction.atomic():
            group.save()
    except IntegrityError as exc:
        raise ScimError(409, f"A group named {group.display_name!r} exists.", "uniqueness") from exc


@transaction.atomic
def group_create(*, account: Account, data: dict, actor: Actor | None) -> ScimGroup:
    group = ScimGroup(account=account, display_name=data["displayName"])
    group.external_id = data["externalId"]
    _save(group)
    group.members.set(data["members"])
    roles_recompute(account=account, users=data["members"], actor=actor)
    audit.record(
        actor=actor,
        action="scim.group.create",
        account_id=account.pk,
        target_type="scim_group",
        target_id=group.pk,
        target_label=group.display_name,
        after=_audited(group, data["members"]),
    )
    return group


@transaction.atomic
def group_replace(*, group: ScimGroup, data: dict, actor: Actor | None) -> ScimGroup:
    """Store a Group's attributes (a PUT, or a PATCH's result) and re-compute the roles of
    everyone whose groups changed (all its members when its name did)."""
    group = ScimGroup.objects.select_for_update().get(pk=group.pk)
    was = _member_ids(group)
    before = _audited(group, was)
    renamed = group.display_name != data["displayName"]
    group.display_name = data["displayName"]
    group.external_id = data["externalId"]
    group.updated_at = timezone.now()
    _save(group)
    group.members.set(data["members"])
    touched = set(was) | set(data["members"]) if renamed else set(was) ^ set(data["members"])
    roles_recompute(account=group.account, users=sorted(touched), actor=actor)
    audit.record_change(
        actor=actor,
        action="scim.group.update",
        account_id=group.account_id,
        target_type="scim_group",
        target_id=group.pk,
        target_label=group.display_name,
        before=before,
        after=_audited(group, data["members"]),
    )
    return group


@transaction.atomic
def group_delete(*, group: ScimGroup, actor: Actor | None) -> None:
    was = _member_ids(group)
    before = _audited(group, was)
    account, pk = group.account, group.pk
    group.delete()
    roles_recompute(account=account, users=was, actor=actor)
    audit.record(
        actor=actor,
        action="scim.group.delete",
        account_id=account.pk,
        target_type="scim_group",
        target_id=pk,
        target_label=before["displayName"],
        before=before,
    )
