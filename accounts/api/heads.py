"""Tenant API: the audit chain's head, signed now (audit/heads.py), for the tenant to keep.

A head kept outside Tollgate is what makes the trail's proof hold against whoever can rewrite
the database: `manage.py verify_audit --head FILE` (or the documented snippet, on an export)
shows any later rewrite, cut or rollback of what it covers. Owners and admins only, as the
trail itself."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import account_or_404
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from accounts.models import Account
from audit.heads import document
from audit.services import signed_audit_head


class HeadIn(serializers.Serializer):
    account = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=2**63 - 1,
        help_text="One of your accounts (default: your first).",
    )


class SignedHeadOut(serializers.Serializer):
    v = serializers.IntegerField()
    chain = serializers.ChoiceField(choices=["audit", "receipts"])
    account_id = serializers.IntegerField()
    seq = serializers.IntegerField(help_text="The chain's last entry (0: empty).")
    hash = serializers.CharField(help_text="That entry's hash.")
    signed_at = serializers.DateTimeField()
    key_id = serializers.CharField(help_text="The signing key (GET /api/receipts/keys).")
    signature = serializers.CharField(
        help_text="Ed25519 over the canonical JSON of v, chain, account_id, seq, hash and"
        " signed_at (sorted keys, no spaces, UTF-8), hex."
    )


def managed_account(request, account_id: int | None) -> Account:
    """One of the caller's accounts (`account_or_404`); 403 unless they are its owner or an
    admin."""
    account = account_or_404(request, account_id)
    require_manager(user=request.user, account=account)
    return account


class AuditHeadView(APIView):
    @extend_schema(
        operation_id="audit_head_retrieve",
        tags=["audit"],
        summary="The account's audit chain head, signed: keep it to detect a later rewrite",
        parameters=[HeadIn],
        responses={200: SignedHeadOut, **error_responses(400, 403, 404)},
    )
    def get(self, request):
        query = HeadIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        account = managed_account(request, query.validated_data.get("account"))
        return Response(document(signed_audit_head(account.pk)))
