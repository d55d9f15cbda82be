"""Tenant API: an account's receipt archives (billing/archives.py), the months that left the
database with retention: their signed manifests, and each month's file to download.

`manage.py verify_receipts --archive FILE --manifests archives.json --public-key KEY` checks
downloaded archives offline: each manifest's signature, each file's SHA-256, its receipts'
hashes, chain and signatures, and that each archive continues the one before it.
"""

from __future__ import annotations

from django.http import FileResponse, Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import account_or_404, id_of
from accounts.api.schema import error_responses
from accounts.models import Account
from billing import archives
from billing.api.receipts import ACCOUNT_HELP, HeadOut, PeriodField, TotalsOut
from billing.models import ReceiptArchive


class ArchivesIn(serializers.Serializer):
    account = id_of(Account, required=False, help_text=ACCOUNT_HELP)


class RunningOut(serializers.Serializer):
    provider_cost_micro = serializers.IntegerField()
    bandwidth_micro = serializers.IntegerField()
    uncollected_micro = serializers.IntegerField()
    wallet_taken_micro = serializers.IntegerField()


class ManifestOut(serializers.Serializer):
    v = serializers.IntegerField()
    account_id = serializers.IntegerField()
    period = serializers.CharField(help_text="The month, YYYY-MM, in the account's time zone.")
    time_zone = serializers.CharField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    first_seq = serializers.IntegerField()
    last_seq = serializers.IntegerField()
    prev = serializers.CharField(
        help_text="The hash of the receipt before first_seq (the previous archive's last_hash)."
    )
    last_hash = serializers.CharField()
    receipts = serializers.IntegerField()
    totals = TotalsOut(help_text="The month's, as its statement states them.")
    running = RunningOut(help_text="The chain's running totals at last_seq.")
    head = HeadOut(help_text="The month's last receipt, signed.")
    ledger_last_entry = serializers.IntegerField(
        allow_null=True, help_text="The largest wallet ledger entry id its receipts name."
    )
    sha256 = serializers.CharField(help_text="Of the file GET .../archives/{period} answers.")
    size_bytes = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    hash = serializers.CharField(
        help_text="SHA-256 of the canonical JSON of every other field but key_id and signature."
    )
    key_id = serializers.CharField()
    signature = serializers.CharField(help_text="Ed25519 over the 32 bytes of `hash`, hex.")


class ArchiveListOut(serializers.Serializer):
    account_id = serializers.IntegerField()
    results = ManifestOut(many=True)


class ArchiveListView(APIView):
    @extend_schema(
        operation_id="receipts_archives_list",
        tags=["receipts"],
        summary="The account's receipt archives (months that left the database), signed",
        parameters=[ArchivesIn],
        responses={200: ArchiveListOut, **error_responses(400, 404)},
    )
    def get(self, request):
        query = ArchivesIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        account = account_or_404(request, query.validated_data.get("account"))
        return Response(
            {
                "account_id": account.pk,
                "results": [archives.manifest(a) for a in archives.archives_of(account.pk)],
            }
        )


class ArchiveFileView(APIView):
    @extend_schema(
        operation_id="receipts_archives_retrieve",
        tags=["receipts"],
        summary="A month's archive: its receipts as GET /api/receipts answers them, gzip'd JSON"
        " lines",
        parameters=[ArchivesIn],
        responses={
            (200, "application/gzip"): OpenApiResponse(response=OpenApiTypes.BINARY),
            **error_responses(400, 404),
        },
    )
    def get(self, request, period: str):
        query = ArchivesIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        checked = PeriodField()
        try:
            period = checked.run_validation(period)
        except serializers.ValidationError:
            raise Http404 from None
        account = account_or_404(request, query.validated_data.get("account"))
        if not ReceiptArchive.objects.filter(account_id=account.pk, period=period).exists():
            raise Http404
        path = archives.archive_path(account.pk, period)
        if not path.is_file():
            raise Http404
        return FileResponse(
            path.open("rb"),
            as_attachment=True,
            filename=f"receipts-{account.pk}-{period}.jsonl.gz",
            content_type="application/gzip",
        )
