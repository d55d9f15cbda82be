"""Tenant API for tag budgets: CRUD under /api/tag-budgets, each with its tag's spend in the
current period. A budget is held on before any vendor call by every request carrying the tag
(billing/tag_ledger.py); docs/tenant-api.md says the rules for people. Every write is on the
audit trail and live on every gateway replica when it answers.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import account_or_404, id_of, money_micro
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from accounts.models import Account, Period
from audit.actors import request_actor
from billing import tag_budgets as services
from billing.models import TagBudget
from core.tags import RULE, TagError, clean_tag

TAGS = ["tag budgets"]


class TagBudgetOut(serializers.Serializer):
    id = serializers.IntegerField(source="budget.pk")
    account = serializers.IntegerField(source="budget.account_id")
    tag = serializers.CharField(source="budget.tag")
    budget_max_micro = serializers.IntegerField(source="budget.budget_max_micro")
    budget_period = serializers.CharField(source="budget.budget_period")
    period = serializers.CharField(
        help_text='The current period: "2026-12-06" (daily), "2026-12" (monthly) or "all", '
        "in the account's time zone."
    )
    spent_micro = serializers.IntegerField(help_text="Spent by the tag in the current period.")
    reserved_micro = serializers.IntegerField(help_text="Held by its requests in flight.")
    created_at = serializers.DateTimeField(source="budget.created_at")


class TagBudgetUpdateIn(serializers.Serializer):
    budget_max_micro = money_micro(required=False)
    budget_period = serializers.ChoiceField(choices=Period.choices, required=False)


class TagBudgetIn(TagBudgetUpdateIn):
    account = id_of(Account, required=False, help_text="Its account; else the caller's first.")
    tag = serializers.CharField(max_length=200, help_text=f"The tag ({RULE}).")
    budget_max_micro = money_micro()

    def validate_tag(self, value: str) -> str:
        try:
            return clean_tag(value)
        except TagError as exc:
            raise serializers.ValidationError(str(exc)) from None


class TagBudgetPage(serializers.Serializer):
    results = TagBudgetOut(many=True)


def _out(budget: TagBudget) -> dict:
    return dict(TagBudgetOut(services.with_spend([budget])[0]).data)


class TagBudgetListView(APIView):
    @extend_schema(
        operation_id="tag_budgets_list",
        tags=TAGS,
        summary="The tag budgets of the caller's accounts, with each tag's current spend",
        responses={200: TagBudgetPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        rows = list(services.tag_budgets_of_user(user=request.user).select_related("account"))
        return Response({"results": TagBudgetOut(services.with_spend(rows), many=True).data})

    @extend_schema(
        operation_id="tag_budgets_create",
        tags=TAGS,
        summary="Give a request tag a budget per period (in `account`, else the caller's first)",
        request=TagBudgetIn,
        responses={201: TagBudgetOut, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        data = TagBudgetIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        account = account_or_404(request, fields.pop("account", None))
        require_manager(user=request.user, account=account)
        try:
            budget = services.tag_budget_create(
                account=account, actor=request_actor(request), **fields
            )
        except services.TagBudgetError as exc:
            raise serializers.ValidationError({"tag": [str(exc)]}) from None
        return Response(_out(budget), status=status.HTTP_201_CREATED)


class TagBudgetDetailView(APIView):
    def _row(self, request: Request, tag_budget_id: int) -> TagBudget:
        rows = services.tag_budgets_of_user(user=request.user).select_related("account")
        return get_object_or_404(rows, pk=tag_budget_id)

    @extend_schema(
        operation_id="tag_budgets_retrieve",
        tags=TAGS,
        summary="One tag budget, with its tag's current spend",
        responses={200: TagBudgetOut, **error_responses(404)},
    )
    def get(self, request: Request, tag_budget_id: int) -> Response:
        return Response(_out(self._row(request, tag_budget_id)))

    @extend_schema(
        operation_id="tag_budgets_update",
        tags=TAGS,
        summary="Change a tag budget's amount or period (live on every replica when this answers)",
        request=TagBudgetUpdateIn,
        responses={200: TagBudgetOut, **error_responses(400, 403, 404)},
    )
    def patch(self, request: Request, tag_budget_id: int) -> Response:
        row = self._row(request, tag_budget_id)
        require_manager(user=request.user, account=row.account)
        data = TagBudgetUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        row = services.tag_budget_update(
            budget=row, actor=request_actor(request), **data.validated_data
        )
        return Response(_out(row))

    @extend_schema(
        operation_id="tag_budgets_destroy",
        tags=TAGS,
        summary="Remove a tag's budget (its spend rows stay; live on every replica when this "
        "answers)",
        request=None,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, tag_budget_id: int) -> Response:
        row = self._row(request, tag_budget_id)
        require_manager(user=request.user, account=row.account)
        services.tag_budget_delete(budget=row, actor=request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
