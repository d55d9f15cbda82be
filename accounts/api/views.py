"""Tenant API for accounts, groups and virtual keys: validate, call a service, serialize."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import selectors, services
from accounts.api import serializers as s
from accounts.api.access_groups import assign_to_group, assign_to_key, chosen_access_groups
from accounts.api.fields import account_or_404
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from audit.actors import request_actor


class AccountView(APIView):
    @extend_schema(
        operation_id="accounts_list",
        tags=["accounts"],
        summary="The accounts the caller is a member of",
        responses={200: s.AccountPage, **error_responses()},
    )
    def get(self, request):
        accounts = selectors.accounts_of_user(user=request.user).order_by("id")
        return Response({"results": s.AccountOut(accounts, many=True).data})


class GroupListView(APIView):
    @extend_schema(
        operation_id="groups_list",
        tags=["groups"],
        summary="The groups of the caller's accounts",
        responses={200: s.GroupPage, **error_responses()},
    )
    def get(self, request):
        groups = selectors.groups_of_user(user=request.user)
        return Response({"results": s.GroupOut(groups, many=True).data})

    @extend_schema(
        operation_id="groups_create",
        tags=["groups"],
        summary="Create a group (in `account`, else the caller's first account)",
        request=s.GroupIn,
        responses={201: s.GroupOut, **error_responses(400, 403, 404)},
    )
    def post(self, request):
        data = s.GroupIn(data=request.data)
        data.is_valid(raise_exception=True)
        accounts = selectors.accounts_of_user(user=request.user)
        account_id = data.validated_data.pop("account", None)
        account = (
            get_object_or_404(accounts, pk=account_id)
            if account_id
            else accounts.order_by("id").first()
        )
        if account is None:
            return Response(status=status.HTTP_404_NOT_FOUND)
        require_manager(user=request.user, account=account)
        group = services.group_create(
            account=account, actor=request_actor(request), **data.validated_data
        )
        return Response(s.GroupOut(group).data, status=status.HTTP_201_CREATED)


class GroupDetailView(APIView):
    @extend_schema(
        operation_id="groups_retrieve",
        tags=["groups"],
        summary="One group",
        responses={200: s.GroupOut, **error_responses(404)},
    )
    def get(self, request, group_id: int):
        group = get_object_or_404(selectors.groups_of_user(user=request.user), pk=group_id)
        return Response(s.GroupOut(group).data)

    @extend_schema(
        operation_id="groups_update",
        tags=["groups"],
        summary="Change a group's budget, limits, cache settings or access groups (null "
        "clears a limit; live on every replica when this answers)",
        request=s.GroupUpdateIn,
        responses={200: s.GroupOut, **error_responses(400, 403, 404)},
    )
    def patch(self, request, group_id: int):
        group = get_object_or_404(selectors.groups_of_user(user=request.user), pk=group_id)
        require_manager(user=request.user, account=group.account)
        data = s.GroupUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        chosen = chosen_access_groups(group.account_id, fields.pop("access_groups", None))
        if fields:
            group = services.group_update(group=group, actor=request_actor(request), **fields)
        assign_to_group(request, group, chosen)
        return Response(s.GroupOut(group).data)


class ApiKeyListView(APIView):
    @extend_schema(
        operation_id="keys_list",
        tags=["keys"],
        summary="The virtual keys of the caller's groups",
        responses={200: s.ApiKeyPage, **error_responses()},
    )
    def get(self, request):
        keys = selectors.api_keys_of_user(user=request.user)
        return Response({"results": s.ApiKeyOut(keys, many=True).data})

    @extend_schema(
        operation_id="keys_create",
        tags=["keys"],
        summary="Create a virtual key; its secret is in this answer only",
        request=s.ApiKeyIn,
        responses={201: s.ApiKeyCreatedOut, **error_responses(400, 403, 404)},
    )
    def post(self, request):
        data = s.ApiKeyIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        group = get_object_or_404(
            selectors.groups_of_user(user=request.user), pk=fields.pop("group")
        )
        require_manager(user=request.user, account=group.account)
        chosen = chosen_access_groups(group.account_id, fields.pop("access_groups", None))
        api_key, secret = services.api_key_create(
            group=group, actor=request_actor(request), **fields
        )
        assign_to_key(request, api_key, chosen)
        out = s.ApiKeyCreatedOut(api_key).data
        out["secret"] = secret
        return Response(out, status=status.HTTP_201_CREATED)


class ApiKeyDetailView(APIView):
    @extend_schema(
        operation_id="keys_retrieve",
        tags=["keys"],
        summary="One virtual key (never its secret)",
        responses={200: s.ApiKeyOut, **error_responses(404)},
    )
    def get(self, request, key_id: int):
        api_key = get_object_or_404(selectors.api_keys_of_user(user=request.user), pk=key_id)
        return Response(s.ApiKeyOut(api_key).data)

    @extend_schema(
        operation_id="keys_update",
        tags=["keys"],
        summary="Change a key's name, models, access groups, expiry, budget, limits or cache "
        "settings (null clears a limit; live on every replica when this answers)",
        request=s.ApiKeyUpdateIn,
        responses={200: s.ApiKeyOut, **error_responses(400, 403, 404)},
    )
    def patch(self, request, key_id: int):
        api_key = get_object_or_404(selectors.api_keys_of_user(user=request.user), pk=key_id)
        require_manager(user=request.user, account=api_key.group.account)
        data = s.ApiKeyUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        chosen = chosen_access_groups(api_key.group.account_id, fields.pop("access_groups", None))
        if fields:
            api_key = services.api_key_update(
                api_key=api_key, actor=request_actor(request), **fields
            )
        assign_to_key(request, api_key, chosen)
        return Response(s.ApiKeyOut(api_key).data)


class ApiKeyRevokeView(APIView):
    @extend_schema(
        operation_id="keys_revoke",
        tags=["keys"],
        summary="Revoke a virtual key (takes no body)",
        request=None,
        responses={200: s.ApiKeyOut, **error_responses(403, 404)},
    )
    def post(self, request, key_id: int):
        api_key = get_object_or_404(selectors.api_keys_of_user(user=request.user), pk=key_id)
        require_manager(user=request.user, account=api_key.group.account)
        api_key = services.api_key_revoke(api_key=api_key, actor=request_actor(request))
        return Response(s.ApiKeyOut(api_key).data)


class CachePurgeView(APIView):
    @extend_schema(
        operation_id="cache_purge",
        tags=["cache"],
        summary="Drop every cached answer of an account (`account`, else the caller's first) "
        "on every replica",
        request=s.CachePurgeIn,
        responses={200: s.CachePurgeOut, **error_responses(400, 403, 404)},
    )
    def post(self, request):
        data = s.CachePurgeIn(data=request.data)
        data.is_valid(raise_exception=True)
        account = account_or_404(request, data.validated_data.get("account"))
        require_manager(user=request.user, account=account)
        purged = services.response_cache_purge(account=account, actor=request_actor(request))
        return Response(s.CachePurgeOut({"purged": purged}).data)
