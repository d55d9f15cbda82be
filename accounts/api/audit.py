"""Tenant API for the audit trail: the entries of the caller's accounts (owners and admins
only), newest first, by cursor; and the same as CSV or JSON lines.

Another account's entries are never listed; naming one is a 404, and a viewer naming their
own is a 403 (the trail is the managers')."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.views import APIView

from accounts import selectors
from accounts.api.fields import id_of
from accounts.api.pagination import LatestIdFirstPagination
from accounts.api.permissions import MANAGERS, require_manager
from accounts.api.schema import error_responses
from accounts.models import Account, Membership
from audit import export
from audit.selectors import entries_of_accounts
from audit.summary import summary


class AuditQueryIn(serializers.Serializer):
    account = id_of(
        Account,
        required=False,
        help_text="One of the caller's accounts; default: every one they manage.",
    )
    action = serializers.CharField(
        required=False,
        help_text='An action ("key.revoke"), or a family of them ("pool.fallback", "wallet").',
    )


class AuditEntryOut(serializers.Serializer):
    id = serializers.IntegerField()
    account = serializers.IntegerField(allow_null=True)
    seq = serializers.IntegerField(help_text="Place in the account's hash chain, from 1.")
    created_at = serializers.DateTimeField()
    actor_kind = serializers.ChoiceField(choices=["user", "token", "operator", "system"])
    actor_id = serializers.IntegerField(allow_null=True)
    actor_label = serializers.CharField(help_text="A username; a token by its prefix.")
    remote_addr = serializers.CharField(allow_null=True)
    action = serializers.CharField(help_text='Stable and dotted, e.g. "pool.fallback.enable".')
    target_type = serializers.CharField()
    target_id = serializers.CharField()
    target_label = serializers.CharField()
    summary = serializers.CharField(help_text="The change in words, amounts in dollars.")
    before = serializers.DictField(help_text="The changed fields before (micro-USD amounts).")
    after = serializers.DictField(help_text="The changed fields after (micro-USD amounts).")
    consent = serializers.CharField(help_text="What turning platform fallback on agrees to.")
    prev_hash = serializers.CharField()
    hash = serializers.CharField(help_text="sha256(prev_hash + the entry's canonical JSON).")

    def to_representation(self, instance):
        return {**instance.as_record(), "summary": summary(instance)}


def audited_entries(request):
    """The entries the caller may read under the query's filters."""
    query = AuditQueryIn(data=request.query_params)
    query.is_valid(raise_exception=True)
    account_id = query.validated_data.get("account")
    if account_id is not None:
        account = get_object_or_404(selectors.accounts_of_user(user=request.user), pk=account_id)
        require_manager(user=request.user, account=account)
        account_ids = [account.pk]
    else:
        account_ids = list(
            Membership.objects.filter(user=request.user, role__in=MANAGERS).values_list(
                "account_id", flat=True
            )
        )
    return entries_of_accounts(
        account_ids=account_ids, action=query.validated_data.get("action", "")
    )


class AuditListView(GenericAPIView):
    pagination_class = LatestIdFirstPagination
    serializer_class = AuditEntryOut

    def get_queryset(self):
        # Also what the browsable API's page (a browser's Accept) reads: a generic view
        # without it fails there.
        return audited_entries(self.request)

    @extend_schema(
        operation_id="audit_list",
        tags=["audit"],
        summary="The audit trail of the accounts the caller manages, newest first, by cursor",
        parameters=[AuditQueryIn],
        responses={200: AuditEntryOut(many=True), **error_responses(400, 403, 404)},
    )
    def get(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(AuditEntryOut(page, many=True).data)


class AuditCsvView(APIView):
    @extend_schema(
        operation_id="audit_export_csv",
        tags=["audit"],
        summary="The filtered audit trail as CSV (a header row, then one line per entry)",
        parameters=[AuditQueryIn],
        responses={
            (200, "text/csv"): OpenApiResponse(
                response=OpenApiTypes.STR, description="audit.csv, streamed."
            ),
            **error_responses(400, 403, 404),
        },
    )
    def get(self, request):
        return export.csv_response(audited_entries(request))


class AuditJsonLinesView(APIView):
    @extend_schema(
        operation_id="audit_export_jsonl",
        tags=["audit"],
        summary="The filtered audit trail as JSON lines (each line one entry, as hashed)",
        parameters=[AuditQueryIn],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                response=OpenApiTypes.STR, description="audit.jsonl, streamed."
            ),
            **error_responses(400, 403, 404),
        },
    )
    def get(self, request):
        return export.jsonl_response(audited_entries(request))
