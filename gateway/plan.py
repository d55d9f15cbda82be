"""The attempt plan, built once per request before any call.

Links follow the client's chain (the model, then its route list or one fallback model, in
the client's order); a canonical model served by several providers with no pin fans out
ranked by per-token cost. Each link has a team attempt when the group has a usable pool of
an eligible kind for its provider, then a platform attempt only when platform serving is on
for the deployment, the profile allows it, and any pool's fallback flag is on.

Chain lock: once a fallback-off team link is reached, later links with no team pool refuse
LM-3021 without calling upstream, so a chain never silently reaches the platform's keys.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from byok.pools import Pool
from core.errors import Forbidden, InvalidRequest
from core.money import prompt_tokens_bound, token_cost_micro, with_margin_micro
from gateway.auth import Principal
from gateway.catalog import Catalog, ModelOffer, Profile
from gateway.shapes import responses_chat, translate
from gateway.types import ANTHROPIC, RESPONSES, ModelRequest
from providers.models import ModelKind

TEAM = "team"
PLATFORM = "platform"


@dataclass(frozen=True, slots=True)
class Attempt:
    served_by: str  # TEAM or PLATFORM
    source: str  # e.g. "openai-main:gpt-4o-mini:team"
    needs_escrow: bool
    escrow_budget_micro: int
    pool: Pool | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """One (provider, model) position of the chain with its attempts in order."""

    order: int
    offer: ModelOffer
    max_tokens: int
    attempts: tuple[Attempt, ...]
    payload: dict  # the body as this vendor is sent it (vendor_payload)
    payload_shape: str  # the shape it is in: which of the vendor's APIs it goes to
    breaker_key: str
    team_scoped: bool
    locked: bool = False  # refused by the chain lock: LM-3021 without an upstream call
    pool_exhausted_refusal: bool = False  # a fallback-off team link: LM-3021 when keys run out

    @property
    def calls_upstream(self) -> bool:
        """Say whether running this link may call a vendor (and so asks its breaker)."""
        return bool(self.attempts) and not self.locked

    def as_json(self) -> dict:
        return {
            "order": self.order,
            "provider": self.offer.profile.name,
            "model": self.offer.name,
            "upstream_model": self.offer.upstream,
            "max_tokens": self.max_tokens,  # the output cap the hold assumes and the vendor gets
            "breaker": self.breaker_key,
            "locked": self.locked,
            "attempts": [
                {
                    "served_by": a.served_by,
                    "source": a.source,
                    "needs_escrow": a.needs_escrow,
                    "escrow_budget_micro": a.escrow_budget_micro,
                    "team_keys": len(a.pool.keys) if a.pool else 0,
                }
                for a in self.attempts
            ],
        }


@dataclass(frozen=True, slots=True)
class Plan:
    links: tuple[Link, ...]
    budget_estimate_micro: int  # worst-case platform cost of the most expensive link

    def as_json(self) -> dict:
        return {
            "links": [link.as_json() for link in self.links],
            "budget_estimate_micro": self.budget_estimate_micro,
        }


def price_rank(offer: ModelOffer) -> tuple[int, str]:
    """Rank a canonical model's offers: cheapest per token first, then by profile name."""
    return (offer.input_micro_per_mtok + offer.output_micro_per_mtok, offer.profile.name)


def prompt_bound(req: ModelRequest) -> int:
    """Return an upper bound on the request's prompt tokens (images: a fixed bound each)."""
    return (
        prompt_tokens_bound(prompt_bytes=req.prompt_bytes, messages=req.prompt_parts)
        + req.media * settings.TOLLGATE["IMAGE_TOKENS_BOUND"]
    )


def output_bound(req: ModelRequest, link_max_tokens: int) -> int:
    """Return an upper bound on the output tokens: the cap, for each answer asked for."""
    return link_max_tokens * req.n


def worst_case_cost_micro(req: ModelRequest, offer: ModelOffer, *, max_tokens: int) -> int:
    # Every prompt token may be a cache write, the dearest kind where a vendor has one.
    return token_cost_micro(
        tokens_in=prompt_bound(req),
        tokens_out=output_bound(req, max_tokens),
        input_micro_per_mtok=max(offer.input_micro_per_mtok, offer.cache_write_micro_per_mtok),
        output_micro_per_mtok=offer.output_micro_per_mtok,
    )


def vendor_payload(req: ModelRequest, profile: Profile) -> tuple[str, dict]:
    """Return the request's body as this profile's vendor is sent it, owned fields aside,
    and the shape it is in.

    A shape the vendor serves natively: the client's body itself; a field Tollgate does not
    know goes only to a profile that passes unknown fields through. Otherwise translated into
    the vendor's chat shape (a Responses body through chat completions), and what has no
    faithful translation is refused (LM-2001) before any vendor is called.
    """
    vendor = profile.adapter
    if req.shape in vendor.native:
        if req.unknown and not profile.passthrough:
            raise InvalidRequest(
                f"'{req.unknown[0]}' is not a field Tollgate knows, and profile "
                f"{profile.name} does not pass unknown fields through."
            )
        return req.shape, req.body
    if req.unknown:
        raise InvalidRequest(f"'{req.unknown[0]}' cannot be translated for {profile.kind} vendors.")
    body = req.body
    if req.shape == RESPONSES:
        body = responses_chat.responses_request_to_chat(body, vendor_kind=profile.kind)
        if vendor.shape != ANTHROPIC:
            return vendor.shape, body
    elif req.embeds:  # offers_for keeps embedding models to vendors that serve them
        raise InvalidRequest(f"Profile {profile.name} serves no embeddings.")
    if vendor.shape == ANTHROPIC:
        return ANTHROPIC, translate.openai_request_to_anthropic(body, vendor_kind=profile.kind)
    return vendor.shape, translate.anthropic_request_to_openai(body, vendor_kind=profile.kind)


def unknown_model_message(model: str, principal: Principal, catalog: Catalog) -> str:
    """Name the unknown model, the nearest this key may use if one is close, and where the
    list is. Only names the key may use are suggested: a hint never reveals another's."""
    usable = [name for name in catalog.model_names() if principal.may_use(name)]
    close = difflib.get_close_matches(model[:200], usable, n=1, cutoff=0.75)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"Unknown model {model!r}.{hint} GET /v1/models lists the models this key may use."


def offers_for(
    model: str, principal: Principal, catalog: Catalog, *, kind: str = ModelKind.CHAT
) -> list[ModelOffer]:
    """Return the offers of one model of a chain, in the order it tries them: a canonical
    model's cheapest first (LM-2001 unknown or not of the kind asked, LM-1003 not for this
    key)."""
    resolved = catalog.resolve(model)
    if not resolved:
        raise InvalidRequest(unknown_model_message(model, principal, catalog))
    if not principal.may_use(model) and not principal.may_use(resolved[0].name):
        raise Forbidden(f"This key may not use model {model!r}.")
    if resolved[0].kind != kind:  # a name is one kind (gateway/catalog.py)
        if kind == ModelKind.EMBEDDING:
            raise InvalidRequest(f"Model {model!r} is not an embedding model.")
        raise InvalidRequest(f"Model {model!r} is an embedding model: ask POST /v1/embeddings.")
    return sorted(resolved, key=price_rank) if len(resolved) > 1 else list(resolved)


def team_pool(
    profile: Profile, group_id: int, pool_for: Callable[[int, str], Pool | None]
) -> Pool | None:
    """Return the group's team keys for a profile, when team serving is on and its kind
    takes plain API keys."""
    if not (settings.GATEWAY_BYOK_ENABLED and profile.team_key_eligible):
        return None
    return pool_for(group_id, profile.name)


def platform_serves(profile: Profile) -> bool:
    """Say whether the platform's own key may serve this profile."""
    return (
        settings.GATEWAY_PTB_ENABLED
        and profile.allows_platform
        and profile.platform_key is not None
    )


def build_plan(
    req: ModelRequest,
    principal: Principal,
    catalog: Catalog,
    pool_for: Callable[[int, str], Pool | None],
) -> Plan:
    """Build the attempt plan; refuse unknown or disallowed models (LM-2001 / LM-1003)."""
    margin_pct = settings.TOLLGATE["ESCROW_MARGIN_PCT"]
    prepaid = principal.billing_mode == "prepaid"
    kind = ModelKind.EMBEDDING if req.embeds else ModelKind.CHAT
    offers = [
        offer for model in req.chain for offer in offers_for(model, principal, catalog, kind=kind)
    ]

    links: list[Link] = []
    budget_estimate = 0
    chain_locked = False
    for order, offer in enumerate(offers, start=1):
        profile = offer.profile
        # An embedding has no output: its hold is its prompt's bound alone.
        max_tokens = (
            0
            if req.embeds
            else min(req.max_tokens or offer.max_output_tokens, offer.max_output_tokens)
        )
        if req.max_tokens is not None and req.max_tokens > offer.max_output_tokens:
            raise InvalidRequest(
                f"'max_tokens' {req.max_tokens} is over {offer.name}'s cap of "
                f"{offer.max_output_tokens}."
            )
        worst_micro = with_margin_micro(
            worst_case_cost_micro(req, offer, max_tokens=max_tokens), margin_pct=margin_pct
        )
        pool = team_pool(profile, principal.group_id, pool_for)
        # The platform pays only for what its prices cover.
        platform_ok = platform_serves(profile) and not req.surcharged
        attempts: list[Attempt] = []
        stem = f"{profile.name}:{offer.name}"
        if pool is not None:
            attempts.append(Attempt(TEAM, f"{stem}:team", False, 0, pool))
            if pool.fallback and platform_ok:
                attempts.append(
                    Attempt(PLATFORM, f"{stem}:platform-fallback", prepaid, worst_micro)
                )
        elif platform_ok and not chain_locked:
            attempts.append(Attempt(PLATFORM, f"{stem}:platform", prepaid, worst_micro))
        if any(a.served_by == PLATFORM for a in attempts):
            budget_estimate = max(budget_estimate, worst_micro)
        team_scoped = pool is not None
        payload_shape, payload = vendor_payload(req, profile)
        links.append(
            Link(
                order=order,
                offer=offer,
                max_tokens=max_tokens,
                attempts=tuple(attempts),
                payload=payload,
                payload_shape=payload_shape,
                breaker_key=(
                    f"{profile.name}#group:{principal.group_id}" if team_scoped else profile.name
                ),
                team_scoped=team_scoped,
                locked=chain_locked and pool is None,
                pool_exhausted_refusal=pool is not None and not pool.fallback,
            )
        )
        if pool is not None and not pool.fallback:
            chain_locked = True
    if req.surcharged and not any(link.attempts for link in links):
        raise InvalidRequest(
            f"'{req.surcharged}' is billed by the vendor beyond tokens: Tollgate serves it "
            "on team keys only."
        )
    return Plan(links=tuple(links), budget_estimate_micro=budget_estimate)
