"""The tenant API's side of SCIM: an owner creates or rotates the account's SCIM token
(POST /api/scim-token); its secret is in that answer only."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import rotation
from accounts.api.fields import account_or_404, id_of
from accounts.api.members import require_owner
from accounts.api.rotation import GRACE_HELP, VALID_UNTIL_HELP
from accounts.api.schema import error_responses
from accounts.models import Account
from audit.actors import request_actor
from scim.models import ScimToken
from scim.tokens import scim_token_issue


class ScimTokenIn(serializers.Serializer):
    account = id_of(Account, required=False, help_text="Default: the caller's first account.")
    grace_s = serializers.IntegerField(
        min_value=0,
        max_value=rotation.GRACE_MAX_S,
        default=0,
        help_text=GRACE_HELP + " Only when rotating: a first token replaces nothing.",
    )


class ScimTokenOut(serializers.ModelSerializer):
    previous_valid_until = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text=VALID_UNTIL_HELP
    )
    token = serializers.CharField(read_only=True, help_text="The SCIM token: shown once.")
    scim_url = serializers.CharField(
        read_only=True, help_text="The SCIM base URL a directory calls (its tenant URL)."
    )

    class Meta:
        model = ScimToken
        fields = ["account", "prefix", "created_at", "previous_valid_until", "token", "scim_url"]


class ScimTokenView(APIView):
    @extend_schema(
        operation_id="scim_token_issue",
        tags=["scim"],
        summary="Create the account's SCIM token, or rotate it (owners only); the token is in "
        "this answer only",
        request=ScimTokenIn,
        responses={201: ScimTokenOut, **error_responses(400, 403, 404)},
    )
    def post(self, request):
        data = ScimTokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        account = account_or_404(request, data.validated_data.get("account"))
        require_owner(user=request.user, account=account)
        token, secret = scim_token_issue(
            account=account, grace_s=data.validated_data["grace_s"], actor=request_actor(request)
        )
        out = ScimTokenOut(token).data
        out["token"] = secret
        out["scim_url"] = request.build_absolute_uri("/scim/v2")
        return Response(out, status=status.HTTP_201_CREATED)
