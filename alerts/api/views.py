"""Tenant API for alerts: rules under /api/alert-rules, webhooks under /api/webhooks (with
/rotate, /test and /deliveries). Members read; owners and admins write (as every other
tenant object). A webhook's secret is in the answer of its creation and rotation only."""

from __future__ import annotations

from django.core.validators import validate_email
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.fields import account_or_404, id_of, money_micro
from accounts.api.permissions import require_manager
from accounts.api.schema import error_responses
from accounts.models import Account, ApiKey, Group, validate_alert_pcts
from alerts import services
from alerts.channels import Unreachable
from alerts.models import (
    RULES_PER_ACCOUNT_MAX,
    WEBHOOKS_PER_ACCOUNT_MAX,
    AlertDelivery,
    AlertRule,
    AlertWebhook,
)
from audit.actors import request_actor
from core.tags import TagError, clean_tag

EMAILS_MAX = 20
DELIVERIES_SHOWN = 100


class RuleOut(serializers.ModelSerializer):
    class Meta:
        model = AlertRule
        fields = [
            "id",
            "account",
            "name",
            "scope",
            "group",
            "api_key",
            "tag",
            "threshold_pcts",
            "amount_micro",
            "emails",
            "email_managers",
            "enabled",
            "created_at",
        ]


class RulePage(serializers.Serializer):
    results = RuleOut(many=True)


def _pcts(value: list[int]) -> None:
    try:
        validate_alert_pcts(value)
    except Exception as exc:
        raise serializers.ValidationError(getattr(exc, "messages", [str(exc)])[0]) from None


def _emails(value: list[str]) -> None:
    for address in value:
        try:
            validate_email(address)
        except Exception:
            raise serializers.ValidationError(f"{address!r} is not an email address.") from None


class RuleUpdateIn(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    threshold_pcts = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        validators=[_pcts],
        help_text="Percents of the budget (1-100), default [50, 80, 100].",
    )
    amount_micro = money_micro(
        required=False,
        allow_null=True,
        help_text="Spend scopes: fire when spent reaches this (percents then unused). "
        "Wallet: fire when the balance goes below it.",
    )
    emails = serializers.ListField(
        child=serializers.CharField(max_length=254),
        max_length=EMAILS_MAX,
        required=False,
        validators=[_emails],
    )
    email_managers = serializers.BooleanField(required=False)
    enabled = serializers.BooleanField(required=False)


class RuleIn(RuleUpdateIn):
    account = id_of(Account, required=False, help_text="Its account; else the caller's first.")
    scope = serializers.ChoiceField(choices=AlertRule.Scope.choices)
    group = id_of(Group, required=False)
    api_key = id_of(ApiKey, required=False)
    tag = serializers.CharField(max_length=64, required=False)


def _target(account: Account, data: dict) -> dict:
    """Check the rule names what its scope needs, in this account; return the fields."""
    scope = data["scope"]
    out: dict = {"scope": scope}
    if scope == AlertRule.Scope.GROUP:
        group = Group.objects.filter(account=account, pk=data.get("group") or 0).first()
        if group is None:
            raise serializers.ValidationError({"group": ["A group of this account."]})
        out["group"] = group
    elif scope == AlertRule.Scope.KEY:
        key = ApiKey.objects.filter(group__account=account, pk=data.get("api_key") or 0).first()
        if key is None:
            raise serializers.ValidationError({"api_key": ["A key of this account."]})
        out["api_key"] = key
    elif scope == AlertRule.Scope.TAG:
        try:
            out["tag"] = clean_tag(data.get("tag", ""))
        except TagError as exc:
            raise serializers.ValidationError({"tag": [str(exc)]}) from None
    elif scope == AlertRule.Scope.WALLET and data.get("amount_micro") is None:
        raise serializers.ValidationError({"amount_micro": ["A wallet rule needs an amount."]})
    return out


class RuleListView(APIView):
    @extend_schema(
        operation_id="alert_rules_list",
        tags=["alerts"],
        summary="The alert rules of the caller's accounts",
        responses={200: RulePage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        rows = AlertRule.objects.filter(account__memberships__user=request.user).order_by("id")
        return Response({"results": RuleOut(rows, many=True).data})

    @extend_schema(
        operation_id="alert_rules_create",
        tags=["alerts"],
        summary="Create an alert rule (in `account`, else the caller's first)",
        request=RuleIn,
        responses={201: RuleOut, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        data = RuleIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        account = account_or_404(request, fields.pop("account", None))
        require_manager(user=request.user, account=account)
        if AlertRule.objects.filter(account=account).count() >= RULES_PER_ACCOUNT_MAX:
            raise serializers.ValidationError(
                {"scope": [f"An account has at most {RULES_PER_ACCOUNT_MAX} alert rules."]}
            )
        target = _target(account, fields)
        for name in ("scope", "group", "api_key", "tag"):
            fields.pop(name, None)
        rule = services.alert_rule_create(
            account=account, actor=request_actor(request), **target, **fields
        )
        return Response(RuleOut(rule).data, status=status.HTTP_201_CREATED)


class RuleDetailView(APIView):
    def _row(self, request: Request, rule_id: int) -> AlertRule:
        return get_object_or_404(
            AlertRule.objects.filter(account__memberships__user=request.user), pk=rule_id
        )

    @extend_schema(
        operation_id="alert_rules_retrieve",
        tags=["alerts"],
        summary="One alert rule",
        responses={200: RuleOut, **error_responses(404)},
    )
    def get(self, request: Request, rule_id: int) -> Response:
        return Response(RuleOut(self._row(request, rule_id)).data)

    @extend_schema(
        operation_id="alert_rules_update",
        tags=["alerts"],
        summary="Change an alert rule's thresholds, recipients or state",
        request=RuleUpdateIn,
        responses={200: RuleOut, **error_responses(400, 403, 404)},
    )
    def patch(self, request: Request, rule_id: int) -> Response:
        rule = self._row(request, rule_id)
        require_manager(user=request.user, account=rule.account)
        data = RuleUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        if rule.scope == AlertRule.Scope.WALLET and fields.get("amount_micro", 0) is None:
            raise serializers.ValidationError({"amount_micro": ["A wallet rule needs an amount."]})
        rule = services.alert_rule_update(rule=rule, actor=request_actor(request), **fields)
        return Response(RuleOut(rule).data)

    @extend_schema(
        operation_id="alert_rules_destroy",
        tags=["alerts"],
        summary="Delete an alert rule",
        request=None,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, rule_id: int) -> Response:
        rule = self._row(request, rule_id)
        require_manager(user=request.user, account=rule.account)
        services.alert_rule_delete(rule=rule, actor=request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookOut(serializers.ModelSerializer):
    class Meta:
        model = AlertWebhook
        fields = ["id", "account", "url", "description", "secret_prefix", "enabled", "created_at"]


class WebhookPage(serializers.Serializer):
    results = WebhookOut(many=True)


class WebhookCreatedOut(WebhookOut):
    secret = serializers.CharField(help_text="The signing secret: shown this once.")

    class Meta(WebhookOut.Meta):
        fields = [*WebhookOut.Meta.fields, "secret"]


class WebhookUpdateIn(serializers.Serializer):
    url = serializers.URLField(max_length=500, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class WebhookIn(WebhookUpdateIn):
    account = id_of(Account, required=False, help_text="Its account; else the caller's first.")
    url = serializers.URLField(max_length=500)


class TryOut(serializers.Serializer):
    number = serializers.IntegerField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()
    duration_ms = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class DeliveryOut(serializers.ModelSerializer):
    tries = TryOut(many=True, read_only=True)

    class Meta:
        model = AlertDelivery
        fields = [
            "id",
            "event_id",
            "channel",
            "webhook",
            "recipients",
            "state",
            "attempts",
            "last_status_code",
            "last_error",
            "next_attempt_at",
            "delivered_at",
            "created_at",
            "payload",
            "tries",
        ]


class DeliveryPage(serializers.Serializer):
    results = DeliveryOut(many=True)


def _unreachable(exc: Unreachable):
    return serializers.ValidationError({"url": [str(exc)]})


def _hooks(request: Request):
    return AlertWebhook.objects.filter(account__memberships__user=request.user)


class WebhookListView(APIView):
    @extend_schema(
        operation_id="webhooks_list",
        tags=["alerts"],
        summary="The alert webhooks of the caller's accounts",
        responses={200: WebhookPage, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        return Response({"results": WebhookOut(_hooks(request).order_by("id"), many=True).data})

    @extend_schema(
        operation_id="webhooks_create",
        tags=["alerts"],
        summary="Add an alert webhook; the answer holds its signing secret, shown once",
        request=WebhookIn,
        responses={201: WebhookCreatedOut, **error_responses(400, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        data = WebhookIn(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        account = account_or_404(request, fields.pop("account", None))
        require_manager(user=request.user, account=account)
        if AlertWebhook.objects.filter(account=account).count() >= WEBHOOKS_PER_ACCOUNT_MAX:
            raise serializers.ValidationError(
                {"url": [f"An account has at most {WEBHOOKS_PER_ACCOUNT_MAX} webhooks."]}
            )
        fields.pop("enabled", None)
        try:
            hook, secret = services.alert_webhook_create(
                account=account, actor=request_actor(request), **fields
            )
        except Unreachable as exc:
            raise _unreachable(exc) from None
        return Response({**WebhookOut(hook).data, "secret": secret}, status=status.HTTP_201_CREATED)


class _WebhookView(APIView):
    def _row(self, request: Request, webhook_id: int) -> AlertWebhook:
        return get_object_or_404(_hooks(request), pk=webhook_id)

    def _managed(self, request: Request, webhook_id: int) -> AlertWebhook:
        hook = self._row(request, webhook_id)
        require_manager(user=request.user, account=hook.account)
        return hook


class WebhookDetailView(_WebhookView):
    @extend_schema(
        operation_id="webhooks_retrieve",
        tags=["alerts"],
        summary="One alert webhook",
        responses={200: WebhookOut, **error_responses(404)},
    )
    def get(self, request: Request, webhook_id: int) -> Response:
        return Response(WebhookOut(self._row(request, webhook_id)).data)

    @extend_schema(
        operation_id="webhooks_update",
        tags=["alerts"],
        summary="Change a webhook's URL, description or state",
        request=WebhookUpdateIn,
        responses={200: WebhookOut, **error_responses(400, 403, 404)},
    )
    def patch(self, request: Request, webhook_id: int) -> Response:
        hook = self._managed(request, webhook_id)
        data = WebhookUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            hook = services.alert_webhook_update(
                hook=hook, actor=request_actor(request), **data.validated_data
            )
        except Unreachable as exc:
            raise _unreachable(exc) from None
        return Response(WebhookOut(hook).data)

    @extend_schema(
        operation_id="webhooks_destroy",
        tags=["alerts"],
        summary="Remove a webhook",
        request=None,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, webhook_id: int) -> Response:
        services.alert_webhook_delete(
            hook=self._managed(request, webhook_id), actor=request_actor(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateView(_WebhookView):
    @extend_schema(
        operation_id="webhooks_rotate",
        tags=["alerts"],
        summary="Give a webhook a new signing secret (shown once; the old one stops at once)",
        request=None,
        responses={200: WebhookCreatedOut, **error_responses(403, 404)},
    )
    def post(self, request: Request, webhook_id: int) -> Response:
        hook = self._managed(request, webhook_id)
        secret = services.alert_webhook_rotate(hook=hook, actor=request_actor(request))
        return Response({**WebhookOut(hook).data, "secret": secret})


class WebhookTestView(_WebhookView):
    @extend_schema(
        operation_id="webhooks_test",
        tags=["alerts"],
        summary="Queue a test alert to the webhook (sent by a worker, logged like any other)",
        request=None,
        responses={202: DeliveryOut, **error_responses(403, 404)},
    )
    def post(self, request: Request, webhook_id: int) -> Response:
        hook = self._managed(request, webhook_id)
        delivery = services.alert_webhook_test(hook=hook, actor=request_actor(request))
        return Response(DeliveryOut(delivery).data, status=status.HTTP_202_ACCEPTED)


class WebhookDeliveriesView(_WebhookView):
    @extend_schema(
        operation_id="webhooks_deliveries",
        tags=["alerts"],
        summary="The webhook's latest deliveries (100), each with its tries",
        responses={200: DeliveryPage, **error_responses(404)},
    )
    def get(self, request: Request, webhook_id: int) -> Response:
        hook = self._row(request, webhook_id)
        rows = (
            AlertDelivery.objects.filter(webhook=hook)
            .prefetch_related("tries")
            .order_by("-created_at", "-id")[:DELIVERIES_SHOWN]
        )
        return Response({"results": DeliveryOut(rows, many=True).data})
