"""`GET /api/keys/{key_id}/payers`: who pays for each model for one of the caller's keys."""

from __future__ import annotations

from dataclasses import asdict

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api.schema import error_responses
from accounts.selectors import api_keys_of_user
from byok.payer_map import PLATFORM, REFUSED, TEAM_KEY, KeyPayers, ModelPayers, payer_map
from core.money import PRICE_FIELDS

# One integer per token price, named as TokenPrices.as_json names them.
PriceOut = serializers.SerializerMetaclass(
    "PriceOut",
    (serializers.Serializer,),
    {"__module__": __name__, **{name: serializers.IntegerField() for name in PRICE_FIELDS}},
)


# One enum in the schema, the model's payer's: an attempt's payer and `then` are named in
# words (a second choice set of the same values would be a second enum).
class PaymentOut(serializers.Serializer):
    payer = serializers.CharField(help_text="team_key or platform.")
    provider = serializers.CharField(help_text="The provider profile it goes through.")


class RefusalOut(serializers.Serializer):
    code = serializers.CharField(help_text="The LM code a request is answered, e.g. LM-3021.")
    message = serializers.CharField(help_text="The message a request is answered.")


class ModelPayerOut(serializers.Serializer):
    model = serializers.CharField()
    kind = serializers.ChoiceField(choices=["chat", "embedding", "moderation"])
    aliases = serializers.ListField(child=serializers.CharField())
    payer = serializers.ChoiceField(
        choices=[TEAM_KEY, PLATFORM, REFUSED],
        help_text="Who pays for the key's next request for this model: the group's team key, "
        "the platform (your wallet, at `price`), or nobody (`refusal`).",
    )
    provider = serializers.CharField(
        allow_null=True, help_text="The provider profile (for a team key: its pool)."
    )
    then = serializers.CharField(
        allow_null=True,
        help_text="Who pays when the first payer fails (every team key benched or failing): "
        "team_key or platform; null: nobody, the request is refused then (LM-3021 after a "
        "team key).",
    )
    attempts = PaymentOut(many=True, help_text="Every payer in the order they are tried.")
    team_keys = serializers.IntegerField(help_text="Keys in the team key payer's pool.")
    team_keys_usable = serializers.IntegerField(
        help_text="Of those, the keys neither failing nor benched now."
    )
    price = PriceOut(
        allow_null=True, help_text="The platform's prices, when the platform is one of the payers."
    )
    refusal = RefusalOut(allow_null=True)


class KeyPayersOut(serializers.Serializer):
    key = serializers.IntegerField()
    prefix = serializers.CharField()
    group = serializers.IntegerField()
    models = ModelPayerOut(many=True)


def model_out(entry: ModelPayers) -> dict:
    return {
        "model": entry.model,
        "kind": entry.kind,
        "aliases": list(entry.aliases),
        "payer": entry.payer,
        "provider": entry.provider,
        "then": entry.then,
        "attempts": [asdict(a) for a in entry.attempts],
        "team_keys": entry.team_keys,
        "team_keys_usable": entry.team_keys_usable,
        "price": entry.price.as_json() if entry.price else None,
        "refusal": {"code": entry.code, "message": entry.reason} if entry.code else None,
    }


def key_payers_out(payers: KeyPayers) -> dict:
    api_key = payers.api_key
    return {
        "key": api_key.pk,
        "prefix": api_key.prefix,
        "group": api_key.group_id,
        "models": [model_out(m) for m in payers.models],
    }


class KeyPayersView(APIView):
    @extend_schema(
        operation_id="keys_payers",
        tags=["keys"],
        summary="Who pays for each model for this key: a team key, the platform, or refused",
        responses={200: KeyPayersOut, **error_responses(404)},
    )
    def get(self, request, key_id: int):
        keys = api_keys_of_user(user=request.user).select_related("group__account")
        api_key = get_object_or_404(keys, pk=key_id)
        return Response(key_payers_out(payer_map(api_key=api_key)))
