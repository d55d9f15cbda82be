"""Tenant API: rotate a virtual key's secret or one's own tenant API token, with a grace
period for the old one (accounts/rotation.py holds the rule)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import rotation, selectors
from accounts.api.errors import Conflict
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from accounts.api.serializers import ApiKeyOut
from accounts.models import TenantToken
from audit.actors import request_actor

GRACE_HELP = (
    "How long the old secret keeps working, in seconds: 0 (refused at once) to 604800 "
    "(7 days). Rotating again before it ends ends the older secret at once."
)
VALID_UNTIL_HELP = "When the old secret stops working; null: it already has."


class RotateIn(serializers.Serializer):
    grace_s = serializers.IntegerField(
        min_value=0,
        max_value=rotation.GRACE_MAX_S,
        help_text=GRACE_HELP,
        error_messages={
            key: rotation.GRACE_ERROR
            for key in ("invalid", "min_value", "max_value", "max_string_length")
        },
    )

    def validate_grace_s(self, value: object) -> int:
        # DRF's IntegerField takes "60" and 60.0; the grace is a JSON integer, said plainly.
        if isinstance(self.initial_data.get("grace_s"), bool | float | str):
            raise serializers.ValidationError(rotation.GRACE_ERROR)
        return int(value)  # type: ignore[call-overload]


class ApiKeyRotatedOut(ApiKeyOut):
    secret = serializers.CharField(read_only=True, help_text="The new secret: shown once.")
    previous_valid_until = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text=VALID_UNTIL_HELP
    )

    class Meta(ApiKeyOut.Meta):
        fields = [*ApiKeyOut.Meta.fields, "previous_valid_until", "secret"]


class TenantTokenOut(serializers.ModelSerializer):
    current = serializers.SerializerMethodField(
        help_text="Whether this request was authenticated with this token."
    )
    previous_valid_until = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text=VALID_UNTIL_HELP
    )

    class Meta:
        model = TenantToken
        fields = ["id", "prefix", "created_at", "revoked_at", "previous_valid_until", "current"]

    def get_current(self, token: TenantToken) -> bool:
        auth = getattr(self.context.get("request"), "auth", None)
        return isinstance(auth, TenantToken) and auth.pk == token.pk


class TenantTokenPage(serializers.Serializer):
    results = TenantTokenOut(many=True)


class TenantTokenRotatedOut(TenantTokenOut):
    secret = serializers.CharField(read_only=True, help_text="The new token: shown once.")

    class Meta(TenantTokenOut.Meta):
        fields = [*TenantTokenOut.Meta.fields, "secret"]


def grace_s_of(request) -> int:
    data = RotateIn(data=request.data)
    data.is_valid(raise_exception=True)
    return data.validated_data["grace_s"]


class ApiKeyRotateView(APIView):
    @extend_schema(
        operation_id="keys_rotate",
        tags=["keys"],
        summary="Give a key a new secret (same id, models, limits, budget and usage); the old "
        "one works for grace_s more seconds, on every replica when this answers",
        request=RotateIn,
        responses={200: ApiKeyRotatedOut, **error_responses(400, 403, 404, 409)},
    )
    def post(self, request, key_id: int):
        api_key = get_object_or_404(selectors.api_keys_of_user(user=request.user), pk=key_id)
        require_manager(user=request.user, account=api_key.group.account)
        grace_s = grace_s_of(request)
        try:
            done = rotation.api_key_rotate(
                api_key=api_key, grace_s=grace_s, actor=request_actor(request)
            )
        except rotation.NotRotatable as refused:
            raise Conflict(str(refused)) from None
        out = ApiKeyRotatedOut(api_key).data
        out["secret"] = done.secret
        return Response(out)


class TenantTokenListView(APIView):
    @extend_schema(
        operation_id="tokens_list",
        tags=["tokens"],
        summary="The caller's own tenant API tokens (never their secrets)",
        responses={200: TenantTokenPage, **error_responses()},
    )
    def get(self, request):
        tokens = TenantToken.objects.filter(user=request.user).order_by("id")
        return Response(
            {"results": TenantTokenOut(tokens, many=True, context={"request": request}).data}
        )


class TenantTokenRotateView(APIView):
    @extend_schema(
        operation_id="tokens_rotate",
        tags=["tokens"],
        summary="Give one of the caller's tenant API tokens a new secret; the old one works "
        "for grace_s more seconds",
        request=RotateIn,
        responses={200: TenantTokenRotatedOut, **error_responses(400, 404, 409)},
    )
    def post(self, request, token_id: int):
        token = get_object_or_404(TenantToken.objects.filter(user=request.user), pk=token_id)
        grace_s = grace_s_of(request)
        actor = request_actor(request)  # named by the token's prefix before it changes
        try:
            done = rotation.tenant_token_rotate(token=token, grace_s=grace_s, actor=actor)
        except rotation.NotRotatable as refused:
            raise Conflict(str(refused)) from None
        out = TenantTokenRotatedOut(token, context={"request": request}).data
        out["secret"] = done.secret
        return Response(out)
