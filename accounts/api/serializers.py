from __future__ import annotations

from rest_framework import serializers

from accounts.api.fields import column_integer, id_of, money_micro
from accounts.models import Account, ApiKey, Group, Period


class AccountOut(serializers.ModelSerializer):
    class Meta:
        model = Account
        fields = [
            "id",
            "name",
            "billing_mode",
            "bandwidth_price_micro_per_gb",
            "markup_bp",
            "time_zone",
            "budget_alert_pcts",
            "created_at",
        ]


class GroupOut(serializers.ModelSerializer):
    class Meta:
        model = Group
        fields = [
            "id",
            "account",
            "name",
            "budget_max_micro",
            "spent_micro",
            "reserved_micro",
            "settled_micro",
            "uncollected_micro",
            "bandwidth_micro_usd_per_gb",
            "rpm_limit",
            "tpm_limit",
            "concurrency_limit",
            "caller_rpm_limit",
            "caller_tpm_limit",
            "caller_budget_max_micro",
            "web_units_per_day",
            "budget_period",
            "period_starts_at",
            "period_ends_at",
            "created_at",
        ]


class GroupIn(serializers.Serializer):
    account = id_of(Account, required=False)
    name = serializers.CharField(max_length=200)
    budget_max_micro = money_micro(required=False, allow_null=True)
    rpm_limit = column_integer(Group, "rpm_limit", min_value=1, required=False, allow_null=True)
    tpm_limit = column_integer(Group, "tpm_limit", min_value=1, required=False, allow_null=True)
    concurrency_limit = column_integer(
        Group, "concurrency_limit", min_value=1, required=False, allow_null=True
    )
    budget_period = serializers.ChoiceField(choices=Period.choices, required=False)


class GroupUpdateIn(serializers.Serializer):
    budget_max_micro = money_micro(required=False, allow_null=True)
    rpm_limit = column_integer(Group, "rpm_limit", min_value=1, required=False, allow_null=True)
    tpm_limit = column_integer(Group, "tpm_limit", min_value=1, required=False, allow_null=True)
    concurrency_limit = column_integer(
        Group, "concurrency_limit", min_value=1, required=False, allow_null=True
    )
    caller_rpm_limit = column_integer(
        Group, "caller_rpm_limit", min_value=1, required=False, allow_null=True
    )
    caller_tpm_limit = column_integer(
        Group, "caller_tpm_limit", min_value=1, required=False, allow_null=True
    )
    caller_budget_max_micro = money_micro(required=False, allow_null=True)
    web_units_per_day = column_integer(
        Group, "web_units_per_day", min_value=0, required=False, allow_null=True
    )
    budget_period = serializers.ChoiceField(choices=Period.choices, required=False)


class ApiKeyOut(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "group",
            "name",
            "prefix",
            "created_at",
            "revoked_at",
            "expires_at",
            "allowed_models",
            "budget_max_micro",
            "spent_micro",
            "reserved_micro",
            "uncollected_micro",
            "rpm_limit",
            "tpm_limit",
            "budget_period",
            "period_starts_at",
            "period_ends_at",
        ]


class ApiKeyIn(serializers.Serializer):
    group = id_of(Group)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    allowed_models = serializers.ListField(
        child=serializers.CharField(max_length=200), required=False
    )
    budget_max_micro = money_micro(required=False, allow_null=True)
    rpm_limit = column_integer(ApiKey, "rpm_limit", min_value=1, required=False, allow_null=True)
    tpm_limit = column_integer(ApiKey, "tpm_limit", min_value=1, required=False, allow_null=True)
    budget_period = serializers.ChoiceField(choices=Period.choices, required=False)


class ApiKeyCreatedOut(ApiKeyOut):
    secret = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(ApiKeyOut.Meta):
        fields = [*ApiKeyOut.Meta.fields, "secret"]


# The list routes answer {"results": [...]}: named here so the schema says so.
class AccountPage(serializers.Serializer):
    results = AccountOut(many=True)


class GroupPage(serializers.Serializer):
    results = GroupOut(many=True)


class ApiKeyPage(serializers.Serializer):
    results = ApiKeyOut(many=True)
