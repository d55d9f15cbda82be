"""The attempt plan, built once per request before any call.

Links follow the client's chain (the model, then its route list or one fallback model, in
the client's order); a canonical model served by several providers with no pin fans out
ranked by per-token cost (providers.catalog.cheapest_first, the order a key's payer map
walks too). Who may pay for each link (team first, the platform when allowed, the chain
lock, the breaker's scope, the margin) is gateway/attempts.py's billing boundary, shared
with web plans; a link's worst case here is its prompt's bound and its output cap at the
offer's prices.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, replace

from byok.pools import Pool
from core.config import tollgate
from core.errors import Forbidden, InvalidRequest
from core.money import prompt_tokens_bound
from gateway.access import listed_models, permitted, refusal_message
from gateway.attempts import (
    Attempt,
    ChainLock,
    billing_boundary,
    platform_serves,
    team_pool,
)
from gateway.auth import Principal
from gateway.catalog import Catalog, ModelOffer, Profile
from gateway.shapes.requests_to_anthropic import openai_request_to_anthropic
from gateway.shapes.requests_to_openai import anthropic_request_to_openai
from gateway.shapes.responses_requests import responses_request_to_chat
from gateway.types import ANTHROPIC, RESPONSES, ModelRequest
from providers.catalog import cheapest_first
from providers.models import ModelKind


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
    # What a vendor counts against a key's tpm before answering: prompt bound + output cap.
    key_tokens: int = 0

    @property
    def profile(self) -> Profile:
        return self.offer.profile

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


def prompt_bound(req: ModelRequest) -> int:
    """Return an upper bound on the request's prompt tokens (images: a fixed bound each)."""
    return (
        prompt_tokens_bound(prompt_bytes=req.prompt_bytes, messages=req.prompt_parts)
        + req.media * tollgate().image_tokens_bound
    )


def output_bound(req: ModelRequest, link_max_tokens: int) -> int:
    """Return an upper bound on the output tokens: the cap, for each answer asked for."""
    return link_max_tokens * req.n


def worst_case_cost_micro(req: ModelRequest, offer: ModelOffer, *, max_tokens: int) -> int:
    prices = offer.prices
    # Every prompt token may be a cache write, the dearest kind where a vendor has one.
    dearest_in = max(prices.input_micro_per_mtok, prices.cache_write_micro_per_mtok)
    return replace(prices, input_micro_per_mtok=dearest_in).cost_micro(
        tokens_in=prompt_bound(req), tokens_out=output_bound(req, max_tokens)
    )


def vendor_payload(req: ModelRequest, profile: Profile) -> tuple[str, dict]:
    """Return the request's body as this profile's vendor is sent it, owned fields aside,
    and the shape it is in.

    A shape the vendor serves natively: the client's body itself; a field Tollgate does not
    know goes only to a profile that passes unknown fields through. Otherwise translated into
    the vendor's chat shape (a Responses body through chat completions), and what has no
    faithful translation is refused (LM-2001) before any vendor is called. A vendor with an
    API of its own then takes it into that API's body (`Provider.own_payload`), refusing alike.
    """
    return profile.adapter.own_payload(*_served_payload(req, profile))


def _served_payload(req: ModelRequest, profile: Profile) -> tuple[str, dict]:
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
        body = responses_request_to_chat(body, vendor_kind=profile.kind)
        if vendor.shape != ANTHROPIC:
            return vendor.shape, body
    elif req.embeds:  # offers_for keeps embedding models to vendors that serve them
        raise InvalidRequest(f"Profile {profile.name} serves no embeddings.")
    elif req.moderates:  # and moderation models likewise
        raise InvalidRequest(f"Profile {profile.name} serves no moderations.")
    if vendor.shape == ANTHROPIC:
        return ANTHROPIC, openai_request_to_anthropic(body, vendor_kind=profile.kind)
    return vendor.shape, anthropic_request_to_openai(body, vendor_kind=profile.kind)


def unknown_model_message(model: str, principal: Principal, catalog: Catalog) -> str:
    """Name the unknown model, the nearest this key may use if one is close, and where the
    list is. Only names the key may use are suggested: a hint never reveals another's."""
    usable = list(listed_models(principal.access, catalog))
    close = difflib.get_close_matches(model[:200], usable, n=1, cutoff=0.75)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"Unknown model {model!r}.{hint} GET /v1/models lists the models this key may use."


def offers_for(
    model: str, principal: Principal, catalog: Catalog, *, kind: str = ModelKind.CHAT
) -> list[ModelOffer]:
    """Return the offers of one model of a chain, in the order it tries them: a canonical
    model's cheapest first (LM-2001 unknown or not of the kind asked, LM-1003 not for this
    key)."""
    offers = catalog.resolve(model)
    if not offers:
        raise InvalidRequest(unknown_model_message(model, principal, catalog))
    resolved = permitted(offers, principal.access, catalog)  # what /v1/models lists
    if not resolved:
        raise Forbidden(refusal_message(model, principal.access, catalog))
    if resolved[0].kind != kind:  # a name is one kind (gateway/catalog.py)
        raise InvalidRequest(kind_mismatch_message(model, asked=kind, found=resolved[0].kind))
    return cheapest_first(resolved)


# A model kind other than chat: its article, its name, and the one route it answers.
KIND_ROUTES: dict[str, tuple[str, str]] = {
    ModelKind.EMBEDDING: ("an embedding model", "POST /v1/embeddings"),
    ModelKind.MODERATION: ("a moderation model", "POST /v1/moderations"),
}


def kind_mismatch_message(model: str, *, asked: str, found: str) -> str:
    """Say that `model` is of another kind than the route asked for, and where it is served."""
    if asked in KIND_ROUTES:
        return f"Model {model!r} is not {KIND_ROUTES[asked][0]}."
    named, route = KIND_ROUTES[found]
    return f"Model {model!r} is {named}: ask {route}."


def request_kind(req: ModelRequest) -> str:
    """Return the kind of model a request asks for: an embedding, a moderation or a chat."""
    if req.embeds:
        return ModelKind.EMBEDDING
    return ModelKind.MODERATION if req.moderates else ModelKind.CHAT


def build_plan(
    req: ModelRequest,
    principal: Principal,
    catalog: Catalog,
    pool_for: Callable[[int, str], Pool | None],
) -> Plan:
    """Build the attempt plan; refuse unknown or disallowed models (LM-2001 / LM-1003).

    The whole chain holds at most TOLLGATE_MAX_ROUTE distinct models: each link may cost two
    vendor calls and its own hold, so a long list is refused before any vendor sees it.
    """
    limit = tollgate().max_route
    if len(req.chain) > limit:
        raise InvalidRequest(
            f"The route list names {len(req.chain)} models; at most {limit} are allowed "
            "(the model and its fallbacks together)."
        )
    prepaid = principal.billing_mode == "prepaid"
    kind = request_kind(req)
    offers = [
        offer for model in req.chain for offer in offers_for(model, principal, catalog, kind=kind)
    ]

    links: list[Link] = []
    budget_estimate = 0
    lock = ChainLock()
    for order, offer in enumerate(offers, start=1):
        profile = offer.profile
        # An embedding or a moderation has no output: its hold is its prompt's bound alone.
        max_tokens = (
            min(req.max_tokens or offer.max_output_tokens, offer.max_output_tokens)
            if req.outputs
            else 0
        )
        if req.max_tokens is not None and req.max_tokens > offer.max_output_tokens:
            raise InvalidRequest(
                f"'max_tokens' {req.max_tokens} is over {offer.name}'s cap of "
                f"{offer.max_output_tokens}."
            )
        boundary = billing_boundary(
            profile=profile,
            stem=f"{profile.name}:{offer.name}",
            group_id=principal.group_id,
            pool=team_pool(profile, principal.group_id, pool_for),
            # The platform pays only for what its prices cover.
            platform_ok=platform_serves(profile) and not req.surcharged,
            prepaid=prepaid,
            worst_micro=worst_case_cost_micro(req, offer, max_tokens=max_tokens),
            lock=lock,
        )
        if boundary.platform_pays:
            budget_estimate = max(budget_estimate, boundary.escrow_micro)
        payload_shape, payload = vendor_payload(req, profile)
        links.append(
            Link(
                order=order,
                offer=offer,
                max_tokens=max_tokens,
                attempts=boundary.attempts,
                payload=payload,
                payload_shape=payload_shape,
                breaker_key=boundary.breaker_key,
                team_scoped=boundary.team_scoped,
                locked=boundary.locked,
                pool_exhausted_refusal=boundary.pool_exhausted_refusal,
                key_tokens=(
                    prompt_bound(req) + output_bound(req, max_tokens) if profile.key_pool else 0
                ),
            )
        )
    if req.surcharged and not any(link.attempts for link in links):
        raise InvalidRequest(
            f"'{req.surcharged}' is billed by the vendor beyond tokens: Tollgate serves it "
            "on team keys only."
        )
    return Plan(links=tuple(links), budget_estimate_micro=budget_estimate)
