from __future__ import annotations

from rest_framework import serializers

from accounts.api.access_groups import access_groups_field, entries_field
from accounts.api.fields import DefaultTagsField, column_integer, id_of, money_micro
from accounts.models import Account, ApiKey, CacheMode, CacheScope, Group, Period

# The response cache's settings (gateway/cache/policy.py): a group's rule, which a key may
# override; a key's empty mode or scope and null TTL follow its group.
CACHE_MODE_HELP = (
    "off: nothing cached; on_request: only requests that send X-Tollgate-Cache-TTL; "
    "always: every cacheable request, kept cache_ttl_s seconds (the model's maximum bounds it)."
)
CACHE_SCOPE_HELP = (
    "Who shares a cached answer, never wider than the account: account, group, key or caller "
    "(the end caller's label)."
)
CACHE_TTL_HELP = (
    "How long answers are kept under always, in seconds (the model's maximum bounds it)."
)
FOLLOWS_GROUP = ' Empty ("") or null: follow the group.'


def _choices_message(choices) -> str:
    return f'"{{input}}" is not one of {", ".join(value for value, _ in choices)}.'


def cache_choice_field(
    choices: list[tuple[str, str]], help_text: str, *, key: bool, **kwargs
) -> serializers.ChoiceField:
    """A group's cache mode or scope, or a key's ("" or null follows its group)."""
    return serializers.ChoiceField(
        choices=choices,
        allow_blank=key,
        allow_null=key,
        help_text=help_text + (FOLLOWS_GROUP if key else ""),
        error_messages={"invalid_choice": _choices_message(choices)},
        **kwargs,
    )


def cache_mode_field(*, key: bool, **kwargs) -> serializers.ChoiceField:
    return cache_choice_field(CacheMode.choices, CACHE_MODE_HELP, key=key, **kwargs)


def cache_scope_field(*, key: bool, **kwargs) -> serializers.ChoiceField:
    return cache_choice_field(CacheScope.choices, CACHE_SCOPE_HELP, key=key, **kwargs)


def cache_ttl_field(*, key: bool, **kwargs) -> serializers.IntegerField:
    """A cache TTL in seconds: at least 1 (mode off is how nothing is kept); a key's null
    follows its group."""
    return column_integer(
        Group,
        "cache_ttl_s",
        min_value=1,
        allow_null=key,
        help_text=CACHE_TTL_HELP + (" Null: follow the group." if key else ""),
        **kwargs,
    )


def key_cache_settings(attrs: dict) -> dict:
    """A key's cache inputs as stored: null mode or scope is "" (follow the group)."""
    for name in ("cache_mode", "cache_scope"):
        if name in attrs and attrs[name] is None:
            attrs[name] = ""
    return attrs


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
    access_groups = serializers.PrimaryKeyRelatedField(
        many=True, read_only=True, help_text="Access groups bounding every key of the group."
    )

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
            "cache_mode",
            "cache_ttl_s",
            "cache_scope",
            "access_groups",
            "default_tags",
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
    cache_mode = cache_mode_field(key=False, required=False)
    cache_ttl_s = cache_ttl_field(key=False, required=False)
    cache_scope = cache_scope_field(key=False, required=False)
    default_tags = DefaultTagsField(required=False)


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
    cache_mode = cache_mode_field(key=False, required=False)
    cache_ttl_s = cache_ttl_field(key=False, required=False)
    cache_scope = cache_scope_field(key=False, required=False)
    access_groups = access_groups_field(required=False)
    default_tags = DefaultTagsField(required=False)


class ApiKeyOut(serializers.ModelSerializer):
    access_groups = serializers.PrimaryKeyRelatedField(
        many=True, read_only=True, help_text="Access groups adding to the key's own models."
    )

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
            "cache_mode",
            "cache_ttl_s",
            "cache_scope",
            "access_groups",
            "default_tags",
        ]


class ApiKeyUpdateIn(serializers.Serializer):
    """What a key's PATCH may change: any of these, the rest kept (null clears a limit)."""

    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    allowed_models = entries_field(required=False)
    access_groups = access_groups_field(required=False)
    budget_max_micro = money_micro(required=False, allow_null=True)
    rpm_limit = column_integer(ApiKey, "rpm_limit", min_value=1, required=False, allow_null=True)
    tpm_limit = column_integer(ApiKey, "tpm_limit", min_value=1, required=False, allow_null=True)
    budget_period = serializers.ChoiceField(choices=Period.choices, required=False)
    cache_mode = cache_mode_field(key=True, required=False)
    cache_ttl_s = cache_ttl_field(key=True, required=False)
    cache_scope = cache_scope_field(key=True, required=False)
    default_tags = DefaultTagsField(required=False)

    def validate(self, attrs: dict) -> dict:
        return key_cache_settings(attrs)


class ApiKeyIn(ApiKeyUpdateIn):
    """A new key: its group, and what a PATCH may change later."""

    group = id_of(Group)


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


class CachePurgeIn(serializers.Serializer):
    account = id_of(
        Account, required=False, help_text="The account to purge; else the caller's first."
    )


class CachePurgeOut(serializers.Serializer):
    purged = serializers.IntegerField(
        help_text="How many cached answers the cache Redis held (its in-process copies on "
        "every replica are dropped too)."
    )
