"""Tenant API for money: wallet balance, its paginated ledger, group budgets and spend."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.pagination import LatestIdFirstPagination
from accounts.api.schema import error_responses
from accounts.selectors import groups_of_user
from billing import selectors
from billing.models import LedgerEntry, Wallet


class WalletOut(serializers.ModelSerializer):
    available_micro = serializers.SerializerMethodField()

    class Meta:
        model = Wallet
        fields = ["account", "balance_micro", "reserved_micro", "available_micro", "updated_at"]

    def get_available_micro(self, wallet: Wallet) -> int:
        return wallet.balance_micro - wallet.reserved_micro


class LedgerOut(serializers.ModelSerializer):
    class Meta:
        model = LedgerEntry
        fields = [
            "id",
            "kind",
            "amount_micro",
            "balance_after_micro",
            "reservation",
            "request_id",
            "reason",
            "created_at",
        ]


class SpendOut(serializers.Serializer):
    group = serializers.IntegerField()
    budget_max_micro = serializers.IntegerField(allow_null=True)
    spent_micro = serializers.IntegerField()
    reserved_micro = serializers.IntegerField()
    settled_micro = serializers.IntegerField()
    uncollected_micro = serializers.IntegerField(
        help_text="Measured cost above a wallet hold that the wallet could not cover: never in"
        " spent or settled."
    )
    remaining_micro = serializers.IntegerField(
        allow_null=True, help_text="Budget left after spend and holds; null without a budget."
    )
    bandwidth_micro_usd_per_gb = serializers.IntegerField()


class WalletView(APIView):
    @extend_schema(
        operation_id="wallet_retrieve",
        tags=["billing"],
        summary="An account's wallet: balance, held, available",
        responses={200: WalletOut, **error_responses(404)},
    )
    def get(self, request, account_id: int):
        wallet = get_object_or_404(
            selectors.wallets_of_user(user=request.user), account_id=account_id
        )
        return Response(WalletOut(wallet).data)


class LedgerView(GenericAPIView):
    # A generic view so the schema shows the page this answers.
    pagination_class = LatestIdFirstPagination
    serializer_class = LedgerOut

    def get_queryset(self):
        # Also what the browsable API's page (a browser's Accept) reads: a generic view
        # without it fails there.
        wallet = get_object_or_404(
            selectors.wallets_of_user(user=self.request.user), account_id=self.kwargs["account_id"]
        )
        return selectors.ledger_of_wallet(wallet=wallet)

    @extend_schema(
        operation_id="ledger_list",
        tags=["billing"],
        summary="An account's wallet ledger, latest first, by cursor (`next`)",
        responses={200: LedgerOut(many=True), **error_responses(404)},
    )
    def get(self, request, account_id: int):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(LedgerOut(page, many=True).data)


class GroupSpendView(APIView):
    @extend_schema(
        operation_id="group_spend_retrieve",
        tags=["billing"],
        summary="A group's budget, spend, holds and what remains",
        responses={200: SpendOut, **error_responses(404)},
    )
    def get(self, request, group_id: int):
        group = get_object_or_404(groups_of_user(user=request.user), pk=group_id)
        remaining = (
            None
            if group.budget_max_micro is None
            else max(0, group.budget_max_micro - group.spent_micro - group.reserved_micro)
        )
        return Response(
            {
                "group": group.pk,
                "budget_max_micro": group.budget_max_micro,
                "spent_micro": group.spent_micro,
                "reserved_micro": group.reserved_micro,
                "settled_micro": group.settled_micro,
                "uncollected_micro": group.uncollected_micro,
                "remaining_micro": remaining,
                "bandwidth_micro_usd_per_gb": group.bandwidth_micro_usd_per_gb,
            }
        )
