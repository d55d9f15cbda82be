from __future__ import annotations

from datetime import UTC, date, datetime, time

from rest_framework import serializers

from accounts.api.fields import id_of
from accounts.models import ApiKey, Group
from core.tags import TagError, clean_tag
from usage.export import LOG_FIELDS
from usage.models import ServedBy, UsageLog
from usage.trail import TEXT_LENGTHS


class MomentField(serializers.DateTimeField):
    """An ISO 8601 date-time, or a bare date meaning its 00:00 UTC."""

    def to_internal_value(self, value):
        if isinstance(value, str) and len(value) == 10:
            try:
                return datetime.combine(date.fromisoformat(value), time(), tzinfo=UTC)
            except ValueError:
                pass
        return super().to_internal_value(value)


class TagField(serializers.CharField):
    """A request tag (core/tags.py): lower-cased; one breaking the rules is a 400 naming them."""

    def to_internal_value(self, data):
        try:
            return clean_tag(super().to_internal_value(data))
        except TagError as exc:
            raise serializers.ValidationError(str(exc)) from None


class RangeIn(serializers.Serializer):
    """A time range of the usage totals: start (inclusive) and end (exclusive), both optional."""

    start = MomentField(
        required=False,
        help_text="From this moment on (ISO 8601 date-time, or a date meaning 00:00 UTC).",
    )
    end = MomentField(
        required=False, help_text="Before this moment (ISO 8601 date-time, or a date)."
    )

    def validate(self, attrs: dict) -> dict:
        if "start" in attrs and "end" in attrs and attrs["start"] >= attrs["end"]:
            raise serializers.ValidationError("start must be before end.")
        return attrs


class UsageQueryIn(RangeIn):
    group = id_of(Group, required=False, help_text="Only this group's rows (one of yours).")
    key = id_of(ApiKey, required=False, help_text="Only this virtual key's rows (one of yours).")
    caller = serializers.CharField(
        required=False, max_length=64, help_text="Only rows of this caller label."
    )
    # The endpoint by its API name: "chat", "web.scrape", "internal.crawl", ...
    route = serializers.CharField(
        required=False,
        max_length=32,
        source="endpoint",
        help_text='Only this endpoint, by API name: "chat", "messages", "web.scrape", ...',
    )
    client_request_id = serializers.CharField(
        required=False, max_length=64, help_text="Only rows with this client request id."
    )
    model = serializers.CharField(
        required=False, max_length=200, help_text="Only rows of this model name."
    )
    tag = TagField(required=False, help_text="Only rows carrying this request tag.")


class UsageLogOut(serializers.ModelSerializer):
    route = serializers.CharField(source="endpoint", read_only=True)
    tags = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="The request's tags: its own (header, body), then its key's and group's.",
    )

    class Meta:
        model = UsageLog
        fields = LOG_FIELDS


# One core.usage_record.AttemptRecord of a row's trail, its fields in ATTEMPT_FIELDS order and
# typed as the attempts' columns were before the trail moved into the row: the API's schema
# and answers stay as they were (a comment, not a docstring: that would enter the schema).
class UsageAttemptOut(serializers.Serializer):
    order = serializers.IntegerField(min_value=0, max_value=32767)
    provider = serializers.CharField(max_length=TEXT_LENGTHS["provider"])
    model = serializers.CharField(max_length=TEXT_LENGTHS["model"])
    served_by = serializers.ChoiceField(choices=ServedBy.choices)
    source = serializers.CharField(max_length=TEXT_LENGTHS["source"])
    outcome = serializers.CharField(max_length=TEXT_LENGTHS["outcome"])
    upstream_status = serializers.IntegerField(
        min_value=0, max_value=32767, allow_null=True, required=False
    )
    latency_ms = serializers.IntegerField(min_value=0, max_value=2147483647, required=False)
    reservation_id = serializers.IntegerField(
        min_value=-(2**63), max_value=2**63 - 1, allow_null=True, required=False
    )
    key_label = serializers.CharField(max_length=TEXT_LENGTHS["key_label"], required=False)


class UsageLogDetailOut(UsageLogOut):
    attempts = UsageAttemptOut(many=True, read_only=True)

    class Meta(UsageLogOut.Meta):
        fields = [*LOG_FIELDS, "attempts"]


class TotalsOut(serializers.Serializer):
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    byok_tokens_in = serializers.IntegerField()
    byok_tokens_out = serializers.IntegerField()
    provider_cost_micro = serializers.IntegerField()
    bytes_in = serializers.IntegerField()
    bytes_out = serializers.IntegerField()
    bandwidth_charge_micro = serializers.IntegerField()
    web_pages = serializers.IntegerField()
    web_rendered_pages = serializers.IntegerField()
    web_queries = serializers.IntegerField()


class DayTotalsOut(TotalsOut):
    day = serializers.DateField()


class ModelTotalsOut(TotalsOut):
    model = serializers.CharField()


class CacheFiguresOut(serializers.Serializer):
    hits = serializers.IntegerField(help_text="Requests answered from the cache.")
    misses = serializers.IntegerField(
        help_text="Requests that looked up (or skipped the lookup with no-cache) and went to "
        "the vendor."
    )
    bypasses = serializers.IntegerField(
        help_text="Requests on the cached routes the cache left alone (off, not asked, not "
        "cacheable)."
    )
    hit_rate = serializers.FloatField(
        allow_null=True,
        help_text="hits / (hits + misses), to 4 places; null when no request looked up.",
    )
    saved_micro = serializers.IntegerField(
        help_text="What the hits' vendor calls would have cost, less what the hits cost, in "
        "micro-USD."
    )
    spent_on_hits_micro = serializers.IntegerField(
        help_text="What the hits cost (the cache-hit price), in micro-USD."
    )


class KeyCacheFiguresOut(CacheFiguresOut):
    key = serializers.IntegerField(allow_null=True, help_text="The virtual key's id.")


class GroupCacheFiguresOut(CacheFiguresOut):
    group = serializers.IntegerField(allow_null=True, help_text="The group's id.")


class ModelCacheFiguresOut(CacheFiguresOut):
    model = serializers.CharField(
        allow_null=True, help_text="The model that served, else the one asked for."
    )


class CacheReportOut(serializers.Serializer):
    totals = CacheFiguresOut()
    by_key = KeyCacheFiguresOut(many=True)
    by_group = GroupCacheFiguresOut(many=True)
    by_model = ModelCacheFiguresOut(many=True)


class DayTotalsPage(serializers.Serializer):
    results = DayTotalsOut(many=True)


class ModelTotalsPage(serializers.Serializer):
    results = ModelTotalsOut(many=True)


class TagQueryIn(RangeIn):
    """The per-tag totals' query: a time range."""


class TagTotalsOut(serializers.Serializer):
    tag = serializers.CharField()
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    byok_tokens_in = serializers.IntegerField()
    byok_tokens_out = serializers.IntegerField()
    provider_cost_micro = serializers.IntegerField()
    bandwidth_charge_micro = serializers.IntegerField()
    spend_micro = serializers.IntegerField(
        help_text="provider_cost_micro plus bandwidth_charge_micro: what the tag's requests "
        "cost, in micro-USD."
    )


class TagTotalsPage(serializers.Serializer):
    results = TagTotalsOut(many=True)
