"""The BYOK admin routes, exactly as the seed fixes them, scoped to the caller's account."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.errors import Conflict
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from accounts.selectors import groups_of_user
from audit.actors import request_actor
from byok import selectors, services
from byok.models import TeamKey
from providers.models import ProviderProfile


def key_out(team_key: TeamKey) -> dict:
    """Label, last4, status, created: never the key."""
    benched = team_key.benched_until is not None and team_key.benched_until > timezone.now()
    state = team_key.status
    if state == TeamKey.Status.ACTIVE and benched:
        state = "benched"
    return {
        "id": team_key.pk,
        "label": team_key.label,
        "last4": team_key.last4,
        "status": state,
        "benched_until": team_key.benched_until if benched else None,
        "created_at": team_key.created_at,
    }


def pool_out(pool) -> dict:
    keys = sorted(pool.keys.all(), key=lambda k: k.pk)
    return {
        "provider": pool.provider,
        "fallback": pool.fallback,
        "keys": [key_out(k) for k in keys],
    }


# The shapes key_out and pool_out build, named for the schema.
class TeamKeyOut(serializers.Serializer):
    id = serializers.IntegerField()
    label = serializers.CharField()
    last4 = serializers.CharField(help_text="The key's last four characters: never the key.")
    status = serializers.ChoiceField(choices=["active", "failing", "benched"])
    benched_until = serializers.DateTimeField(
        allow_null=True, help_text="While benched after a vendor refusal, until when."
    )
    created_at = serializers.DateTimeField()


class PoolOut(serializers.Serializer):
    provider = serializers.CharField(help_text="Provider profile name.")
    fallback = serializers.BooleanField(
        help_text="Whether the platform key may serve when every team key fails."
    )
    keys = TeamKeyOut(many=True)


class PoolListOut(serializers.Serializer):
    group = serializers.IntegerField()
    providers = PoolOut(many=True)
    eligible_providers = serializers.ListField(
        child=serializers.CharField(),
        help_text="Sorted names of the live providers a team key can be added for.",
    )


PROVIDER = OpenApiParameter(
    "provider",
    str,
    OpenApiParameter.PATH,
    description="A provider profile name; GET .../byok lists the eligible ones.",
)


class FallbackIn(serializers.Serializer):
    fallback = serializers.BooleanField()


class TeamKeyIn(serializers.Serializer):
    label = serializers.CharField(max_length=200, allow_blank=True, trim_whitespace=False)
    key = serializers.CharField(max_length=512, trim_whitespace=False)


def provider_from_path(provider: str) -> str:
    """Return a provider name from the path, or refuse one no profile can have (NUL bytes,
    longer than the name column): refused as unknown before the database sees it."""
    longest = ProviderProfile._meta.get_field("name").max_length or 0
    if len(provider) > longest or "\x00" in provider:
        raise ValidationError(f"Unknown provider. {selectors.eligible_providers_hint()}")
    return provider


def refused(exc: services.TeamKeyRefused):
    return Conflict(str(exc)) if exc.conflict else ValidationError(str(exc))


class PoolListView(APIView):
    @extend_schema(
        operation_id="byok_pools_list",
        tags=["team keys"],
        summary="A group's team key pools, and the providers a team key can be added for",
        responses={200: PoolListOut, **error_responses(404)},
    )
    def get(self, request, group_id: int):
        group = get_object_or_404(groups_of_user(user=request.user), pk=group_id)
        pools = selectors.pools_of_group(group_id=group.pk)
        return Response(
            {
                "group": group.pk,
                "providers": [pool_out(p) for p in pools],
                "eligible_providers": selectors.eligible_providers(),
            }
        )


class PoolView(APIView):
    @extend_schema(
        operation_id="byok_pool_update",
        tags=["team keys"],
        summary="Set a pool's fallback flag (creates the pool)",
        parameters=[PROVIDER],
        request=FallbackIn,
        responses={200: PoolOut, **error_responses(400, 403, 404)},
    )
    def put(self, request, group_id: int, provider: str):
        group = get_object_or_404(groups_of_user(user=request.user), pk=group_id)
        require_manager(user=request.user, account=group.account)
        data = FallbackIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            pool = services.pool_set_fallback(
                group=group,
                provider=provider_from_path(provider),
                fallback=data.validated_data["fallback"],
                actor=request_actor(request),
            )
        except services.TeamKeyRefused as exc:
            raise refused(exc) from None
        return Response(pool_out(pool))


class PoolKeysView(APIView):
    @extend_schema(
        operation_id="byok_keys_create",
        tags=["team keys"],
        summary="Add a team key (sealed; answered with label and last4 only)",
        parameters=[PROVIDER],
        request=TeamKeyIn,
        responses={201: TeamKeyOut, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request, group_id: int, provider: str):
        group = get_object_or_404(groups_of_user(user=request.user), pk=group_id)
        require_manager(user=request.user, account=group.account)
        data = TeamKeyIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            team_key = services.team_key_add(
                group=group,
                provider=provider_from_path(provider),
                actor=request_actor(request),
                **data.validated_data,
            )
        except services.TeamKeyRefused as exc:
            raise refused(exc) from None
        return Response(key_out(team_key), status=status.HTTP_201_CREATED)


class TeamKeyView(APIView):
    @extend_schema(
        operation_id="byok_keys_destroy",
        tags=["team keys"],
        summary="Remove a team key; every replica forgets it before this answers",
        description=(
            "A pool's last key is removed too (an API does not ask first): the pool stays, "
            "empty, with its fallback flag, and the group's next request for the provider's "
            "models answers as with no pool: served on the platform's keys when fallback is "
            "on, refused with LM-3021 (its pool is empty) when it is off."
        ),
        responses={
            204: OpenApiResponse(description="Removed."),
            **error_responses(403, 404),
        },
    )
    def delete(self, request, group_id: int, key_id: int):
        group = get_object_or_404(groups_of_user(user=request.user), pk=group_id)
        team_key = get_object_or_404(
            selectors.team_keys_of_user(user=request.user), pk=key_id, pool__group=group
        )
        require_manager(user=request.user, account=group.account)
        services.team_key_delete(team_key=team_key, actor=request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
