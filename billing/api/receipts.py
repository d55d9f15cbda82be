"""Tenant API for receipts: the published keys, one request's receipts with their proof, an
account's chain page by page, and a month's signed statement (billing/statements.py).

A caller reads the receipts of its own accounts only: another account's request id is a 404.
The chain and statement routes read one account: `account`, else the caller's first.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import account_or_404, column_integer, id_of, request_id_or_404
from accounts.api.schema import error_responses
from accounts.models import Account
from accounts.selectors import accounts_of_user
from billing import statements
from billing.models import Receipt


class MomentField(serializers.DateTimeField):
    """An ISO 8601 date-time, or a bare date meaning its 00:00 UTC (as the usage filters)."""

    def to_internal_value(self, value):
        if isinstance(value, str) and len(value) == 10:
            try:
                return datetime.combine(date.fromisoformat(value), time(), tzinfo=UTC)
            except ValueError:
                pass
        return super().to_internal_value(value)


ACCOUNT_HELP = "One of your accounts (default: your first)."
PERIOD_HELP = "A calendar month in the account's time zone, YYYY-MM."


class PeriodField(serializers.CharField):
    """A calendar month, YYYY-MM."""

    def __init__(self, **kwargs) -> None:
        super().__init__(min_length=7, max_length=7, help_text=PERIOD_HELP, **kwargs)

    def to_internal_value(self, data) -> str:
        period = super().to_internal_value(data)
        try:
            statements.month_bounds(period, time_zone="UTC")
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return period


class ReceiptListIn(serializers.Serializer):
    account = id_of(Account, required=False, help_text=ACCOUNT_HELP)
    period = PeriodField(required=False)
    after_seq = column_integer(
        Receipt,
        "seq",
        required=False,
        min_value=0,
        default=0,
        help_text="Only receipts after this one in the chain (the last `seq` of a page).",
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=statements.PAGE_MAX, default=100
    )

    def get_fields(self):
        # `from` and `to` are Python keywords: they cannot be declared as attributes.
        fields = super().get_fields()
        fields["from"] = MomentField(
            required=False,
            help_text="Settled from this moment on (ISO 8601 date-time, or a date: 00:00 UTC).",
        )
        fields["to"] = MomentField(
            required=False, help_text="Settled before this moment (ISO 8601 date-time, or a date)."
        )
        return fields

    def validate(self, attrs: dict) -> dict:
        if "period" in attrs and ("from" in attrs or "to" in attrs):
            raise serializers.ValidationError("Give a period or from/to, not both.")
        if "from" in attrs and "to" in attrs and attrs["from"] >= attrs["to"]:
            raise serializers.ValidationError("from must be before to.")
        return attrs


class StatementIn(serializers.Serializer):
    account = id_of(Account, required=False, help_text=ACCOUNT_HELP)
    period = PeriodField(required=False)


class PublicKeyOut(serializers.Serializer):
    key_id = serializers.CharField()
    algorithm = serializers.CharField(help_text='Always "Ed25519".')
    public_key = serializers.CharField(help_text="The 32 raw bytes, base64url without padding.")
    newest = serializers.BooleanField(help_text="The key new receipts are signed with.")


class PublicKeysOut(serializers.Serializer):
    keys = PublicKeyOut(many=True)


class ReceiptOut(serializers.Serializer):
    account_id = serializers.IntegerField()
    seq = serializers.IntegerField(help_text="Its place in the account's chain, from 1.")
    kind = serializers.CharField(
        help_text='"charge" (a stored request), "cache_hit" (a request the response cache'
        ' answered: its cache price), "unmeasured" (served, its usage never arrived: charged at'
        ' its hold) or "trueup" (that usage arrived: the difference).'
    )
    request_id = serializers.CharField()
    settled_at = serializers.DateTimeField()
    body = serializers.CharField(
        help_text="The canonical JSON its hash covers: hash these UTF-8 bytes as they are."
    )
    prev_hash = serializers.CharField(help_text="The hash of the account's receipt before it.")
    hash = serializers.CharField(help_text="SHA-256 of `body`, hex.")
    signature = serializers.CharField(
        help_text="Ed25519 over the 32 bytes of `hash`, hex; empty on a receipt a later one in"
        " its batch covers."
    )
    key_id = serializers.CharField(help_text="The signing key (GET /api/receipts/keys).")


class ReceiptDetailOut(ReceiptOut):
    document = serializers.JSONField(help_text="`body` parsed.")
    proof = ReceiptOut(
        many=True,
        help_text="The receipts after it up to the first signed one: hashing on from it"
        " reaches a signature.",
    )


class RequestReceiptsOut(serializers.Serializer):
    request_id = serializers.CharField()
    results = ReceiptDetailOut(many=True)


class ReceiptPageOut(serializers.Serializer):
    account_id = serializers.IntegerField()
    next = serializers.URLField(allow_null=True, help_text="The next page; null on the last.")
    results = ReceiptOut(many=True)


class TotalsOut(serializers.Serializer):
    provider_cost_micro = serializers.IntegerField()
    bandwidth_micro = serializers.IntegerField()
    total_micro = serializers.IntegerField()
    uncollected_micro = serializers.IntegerField(
        help_text="Measured above a hold that the wallet could not cover: stated, not charged."
    )
    wallet_taken_micro = serializers.IntegerField(help_text="What the wallet paid, in sum.")


class HeadOut(serializers.Serializer):
    seq = serializers.IntegerField()
    hash = serializers.CharField()
    signature = serializers.CharField()
    key_id = serializers.CharField()
    settled_at = serializers.DateTimeField()


class StatementOut(serializers.Serializer):
    v = serializers.IntegerField()
    account_id = serializers.IntegerField()
    period = serializers.CharField()
    time_zone = serializers.CharField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    issued_at = serializers.DateTimeField()
    complete = serializers.BooleanField(help_text="The month has ended: nothing more joins it.")
    receipts = serializers.IntegerField()
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField(allow_null=True)
    last_hash = serializers.CharField(allow_null=True, help_text="The month's last receipt's.")
    totals = TotalsOut(help_text="Summed from the receipts' bodies.")
    head = HeadOut(
        allow_null=True,
        help_text="The chain's last receipt settled before the month's end; null if none.",
    )
    signed_heads = serializers.DictField(
        help_text="`receipts` and `audit`: both chains' heads as the statement was issued,"
        " signed (as GET /api/receipts/head and /api/audit/head answer them): keep them."
    )
    hash = serializers.CharField(
        help_text="SHA-256 of the canonical JSON of every other field but key_id and signature."
    )
    key_id = serializers.CharField()
    signature = serializers.CharField(help_text="Ed25519 over the 32 bytes of `hash`, hex.")


class ReceiptKeysView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="receipt_keys_list",
        tags=["receipts"],
        summary="The public keys receipts are signed with, newest first (no authentication)",
        responses={200: PublicKeysOut},
    )
    def get(self, request):
        return Response({"keys": statements.published_keys()})


class RequestReceiptsView(APIView):
    @extend_schema(
        operation_id="receipts_of_request_retrieve",
        tags=["receipts"],
        summary="A request's receipts (by the gateway's request id), each with its proof",
        responses={200: RequestReceiptsOut, **error_responses(404)},
    )
    def get(self, request, request_id: str):
        request_id = request_id_or_404(request_id)
        accounts = list(accounts_of_user(user=request.user).values_list("pk", flat=True))
        found = statements.request_receipts(account_ids=accounts, request_id=request_id)
        if not found:
            raise Http404
        return Response({"request_id": request_id, "results": found})


class ReceiptListView(APIView):
    @extend_schema(
        operation_id="receipts_list",
        tags=["receipts"],
        summary="An account's receipts in chain order, by `after_seq` (follow `next`)",
        parameters=[ReceiptListIn],
        responses={200: ReceiptPageOut, **error_responses(400, 404)},
    )
    def get(self, request):
        query = ReceiptListIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        account = account_or_404(request, params.get("account"))
        start, end = params.get("from"), params.get("to")
        if "period" in params:
            start, end = statements.month_bounds(params["period"], time_zone=account.time_zone)
        page = statements.chain_page(
            account_id=account.pk,
            after_seq=params["after_seq"],
            start=start,
            end=end,
            limit=params["limit"],
        )
        following = None
        if len(page) == params["limit"]:
            following = request.build_absolute_uri(
                "?" + _with(request.query_params, after_seq=page[-1].seq).urlencode()
            )
        return Response(
            {
                "account_id": account.pk,
                "next": following,
                "results": [statements.receipt_record(r) for r in page],
            }
        )


class StatementView(APIView):
    @extend_schema(
        operation_id="receipts_statement_retrieve",
        tags=["receipts"],
        summary="A month's statement: totals of its receipts and the chain's signed head, signed",
        parameters=[StatementIn],
        responses={200: StatementOut, **error_responses(400, 404)},
    )
    def get(self, request):
        query = StatementIn(data=request.query_params)
        query.is_valid(raise_exception=True)
        account = account_or_404(request, query.validated_data.get("account"))
        now = timezone.now()
        period = query.validated_data.get("period") or statements.month_of(
            now, time_zone=account.time_zone
        )
        return Response(statements.statement(account=account, period=period, now=now))


def _with(params, **changed):
    params = params.copy()
    for name, value in changed.items():
        params[name] = str(value)
    return params
