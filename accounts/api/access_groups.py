"""Tenant API for model access groups: CRUD under /api/access-groups, and their assignment to
keys and groups (the `access_groups` field of PATCH /api/keys/{id} and /api/groups/{id}).

The rule the entries follow is accounts/model_access.py (docs/tenant-api.md says it for
people). Every write is live on every gateway replica when it answers.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import access_groups as services
from accounts.api.fields import account_or_404, id_of
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from accounts.model_access import (
    ACCESS_GROUPS_MAX,
    ENTRIES_MAX,
    ENTRY_MAX_CHARS,
    BadEntry,
    clean_entries,
    name_problem,
)
from accounts.models import AccessGroup, Account, ApiKey, Group
from audit.actors import request_actor

ENTRIES_HELP = (
    f"Model names and patterns (at most {ENTRIES_MAX}, each up to {ENTRY_MAX_CHARS} "
    "characters): an exact name or alias (`gpt-4o-mini`), `*` patterns over canonical names "
    "(`gpt-*`), and either under a profile or provider kind (`anthropic/*`, "
    "`stub-openai/gpt-4o-mini`)."
)
ASSIGN_HELP = (
    f"Ids of access groups of the same account (at most {ACCESS_GROUPS_MAX}); the list "
    "replaces the assigned ones, [] clears them."
)


def entries_field(**kwargs) -> serializers.ListField:
    """A list of model entries, validated by the one rule (accounts/model_access.py)."""
    return serializers.ListField(
        child=serializers.CharField(max_length=ENTRY_MAX_CHARS, trim_whitespace=False),
        max_length=ENTRIES_MAX,
        validators=[_valid_entries],
        help_text=ENTRIES_HELP,
        **kwargs,
    )


def _valid_entries(value: list[str]) -> None:
    try:
        clean_entries(value)
    except BadEntry as exc:
        raise serializers.ValidationError(str(exc)) from None


def access_groups_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=id_of(AccessGroup), max_length=ACCESS_GROUPS_MAX, help_text=ASSIGN_HELP, **kwargs
    )


class AccessGroupOut(serializers.ModelSerializer):
    keys = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    groups = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = AccessGroup
        fields = ["id", "account", "name", "description", "entries", "keys", "groups", "created_at"]


class AccessGroupUpdateIn(serializers.Serializer):
    name = serializers.CharField(max_length=64, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    entries = entries_field(required=False)

    def validate_name(self, value: str) -> str:
        problem = name_problem(value)
        if problem:
            raise serializers.ValidationError(problem[0].upper() + problem[1:] + ".")
        return value


class AccessGroupIn(AccessGroupUpdateIn):
    account = id_of(Account, required=False, help_text="Its account; else the caller's first.")
    name = serializers.CharField(max_length=64)
    entries = entries_field(min_length=1)


class AccessGroupPage(serializers.Serializer):
    results = AccessGroupOut(many=True)


def _name_taken(account_id: int, name: str, *, other_than: int | None = None) -> None:
    taken = AccessGroup.objects.filter(account_id=account_id, name=name)
    if other_than is not None:
        taken = taken.exclude(pk=other_than)
    if taken.exists():
        raise serializers.ValidationError({"name": [f"An access group {name!r} exists already."]})


class AccessGroupListView(APIView):
    @extend_schema(
        operation_id="access_groups_list",
        tags=["access groups"],
        summary="The model access groups of the caller's accounts",
        responses={200: AccessGroupPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        rows = services.access_groups_of_user(user=request.user).prefetch_related("keys", "groups")
        return Response({"results": AccessGroupOut(rows, many=True).data})

    @extend_schema(
        operation_id="access_groups_create",
        tags=["access groups"],
        summary="Create a model access group (in `account`, else the caller's first)",
        request=AccessGroupIn,
        responses={201: AccessGroupOut, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        data = AccessGroupIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        account = account_or_404(request, fields.pop("account", None))
        require_manager(user=request.user, account=account)
        _name_taken(account.pk, fields["name"])
        row = services.access_group_create(account=account, actor=request_actor(request), **fields)
        return Response(AccessGroupOut(row).data, status=status.HTTP_201_CREATED)


class AccessGroupDetailView(APIView):
    def _row(self, request: Request, access_group_id: int) -> AccessGroup:
        return get_object_or_404(
            services.access_groups_of_user(user=request.user), pk=access_group_id
        )

    @extend_schema(
        operation_id="access_groups_retrieve",
        tags=["access groups"],
        summary="One model access group",
        responses={200: AccessGroupOut, **error_responses(404)},
    )
    def get(self, request: Request, access_group_id: int) -> Response:
        return Response(AccessGroupOut(self._row(request, access_group_id)).data)

    @extend_schema(
        operation_id="access_groups_update",
        tags=["access groups"],
        summary="Change an access group's name, description or entries (live on every "
        "replica for every key it reaches when this answers)",
        request=AccessGroupUpdateIn,
        responses={200: AccessGroupOut, **error_responses(400, 403, 404)},
    )
    def patch(self, request: Request, access_group_id: int) -> Response:
        row = self._row(request, access_group_id)
        require_manager(user=request.user, account=row.account)
        data = AccessGroupUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        if "name" in data.validated_data:
            _name_taken(row.account_id, data.validated_data["name"], other_than=row.pk)
        row = services.access_group_update(
            access_group=row, actor=request_actor(request), **data.validated_data
        )
        return Response(AccessGroupOut(row).data)

    @extend_schema(
        operation_id="access_groups_destroy",
        tags=["access groups"],
        summary="Delete an access group and its assignments (live on every replica when this "
        "answers)",
        request=None,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, access_group_id: int) -> Response:
        row = self._row(request, access_group_id)
        require_manager(user=request.user, account=row.account)
        services.access_group_delete(access_group=row, actor=request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


def chosen_access_groups(account_id: int, ids: list[int] | None) -> list[AccessGroup] | None:
    """Return the access groups these ids name in the account (None when the body named
    none), or a 400 naming one that is not there (another account's reads as unknown: its
    existence is not confirmed). Called before any write, so a bad id changes nothing."""
    if ids is None:
        return None
    rows = {row.pk: row for row in AccessGroup.objects.filter(account_id=account_id, pk__in=ids)}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise serializers.ValidationError(
            {"access_groups": [f"No access group {missing[0]} in this account."]}
        )
    return list(rows.values())


def assign_to_key(request: Request, api_key: ApiKey, chosen: list[AccessGroup] | None) -> None:
    """Assign a key's access groups when its PATCH or create named them."""
    if chosen is not None:
        services.key_access_groups_set(
            api_key=api_key, access_groups=chosen, actor=request_actor(request)
        )


def assign_to_group(request: Request, group: Group, chosen: list[AccessGroup] | None) -> None:
    """Assign the access groups bounding a group's keys when its PATCH named them."""
    if chosen is not None:
        services.group_access_groups_set(
            group=group, access_groups=chosen, actor=request_actor(request)
        )
