"""The provider's claims, read from config.json at each token, so a test changes a person's
email between two sign-ins. A user's entry may also ask for a bad token: `aud` (another
audience) or `exp_offset_s` (an exp that many seconds from now: negative is expired)."""

from __future__ import annotations

import json
import time

from django.conf import settings
from oauth2_provider.oauth2_validators import OAuth2Validator


def entry(username: str) -> dict:
    op_dir = settings.OP_DIR  # type: ignore[misc]  # the provider's settings.py, not config's
    config = json.loads((op_dir / "config.json").read_text())
    return config["users"][username]


class Validator(OAuth2Validator):
    oidc_claim_scope = None  # every claim of the user, groups included

    def get_additional_claims(self, request):
        return dict(entry(request.user.username)["claims"])

    def get_id_token_dictionary(self, token, token_handler, request):
        claims, expires = super().get_id_token_dictionary(token, token_handler, request)
        offset = entry(request.user.username).get("exp_offset_s")
        if offset is not None:
            claims["exp"] = int(time.time()) + offset
            claims["iat"] = int(time.time()) + offset - 300
        return claims, expires

    def finalize_id_token(self, id_token, token, token_handler, request):
        audience = entry(request.user.username).get("aud")
        if audience:
            id_token["aud"] = audience
        return super().finalize_id_token(id_token, token, token_handler, request)
