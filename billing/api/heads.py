"""Tenant API: the receipt chain's head, signed now (audit/heads.py), for the tenant to keep.

`manage.py verify_receipts --head FILE` (or the documented snippet) holds the chain against
a head kept earlier: receipts cut off the end, a chain rolled back or a receipt rewritten and
re-hashed all show, whoever did it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import account_or_404
from accounts.api.heads import HeadIn, SignedHeadOut
from accounts.api.schema import error_responses
from audit.heads import document
from billing.receipts import signed_receipt_head


class ReceiptHeadView(APIView):
    @extend_schema(
        operation_id="receipts_head_retrieve",
        tags=["receipts"],
        summary="The account's receipt chain head, signed: keep it to detect a later cut",
        parameters=[HeadIn],
        responses={200: SignedHeadOut, **error_responses(400, 404)},
    )
    def get(self, request):
        query = HeadIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        account = account_or_404(request, query.validated_data.get("account"))
        return Response(document(signed_receipt_head(account.pk)))
