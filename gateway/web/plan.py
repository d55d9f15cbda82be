"""The web plan: the ordered profiles an action walks, built once before any call.

Scrape: direct fetchers first (our own, then fakes), then renderers; `render_js` goes
straight to the renderers. Search: the search profiles. Within each group, by name. Each
profile is a link whose attempts are gateway/attempts.py's billing boundary, as for model
plans (the chain lock included); a link's worst case is one unit at its price.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from byok.pools import Pool
from core.errors import InvalidRequest
from core.money import with_margin_micro
from gateway.attempts import (
    Attempt,
    ChainLock,
    billing_boundary,
    escrow_margin_pct,
    platform_serves,
    team_pool,
)
from gateway.auth import Principal
from gateway.catalog import Catalog, WebProfile
from gateway.web.types import SCRAPE, WebRequest


@dataclass(frozen=True, slots=True)
class WebLink:
    order: int
    profile: WebProfile
    unit: str  # what a success bills
    price_micro: int  # per unit
    attempts: tuple[Attempt, ...]
    breaker_key: str
    locked: bool = False  # the chain lock: LM-3021 without a call
    pool_exhausted_refusal: bool = False
    key_tokens: int = 0  # web vendors limit no tokens

    @property
    def judged(self) -> bool:
        """Say whether a breaker judges this link (not our own fetcher: its failures are the
        site's, not a provider's)."""
        return self.profile.adapter.judged

    def as_json(self) -> dict:
        return {
            "order": self.order,
            "provider": self.profile.name,
            "unit": self.unit,
            "price_micro": self.price_micro,
            "locked": self.locked,
            "attempts": [a.served_by for a in self.attempts],
        }


@dataclass(frozen=True, slots=True)
class WebPlan:
    links: tuple[WebLink, ...]
    # Worst case: every platform link bills its unit (a direct page, then a rendered one).
    budget_estimate_micro: int

    def as_json(self) -> dict:
        return {
            "links": [link.as_json() for link in self.links],
            "budget_estimate_micro": self.budget_estimate_micro,
        }


def candidates(req: WebRequest, catalog: Catalog) -> list[WebProfile]:
    """Return the profiles that may serve the action, in the order they are tried."""
    serving = [p for p in catalog.web.values() if p.unit_for(req.action)]
    if req.action != SCRAPE:
        return sorted(serving, key=lambda p: p.name)
    # Renderers last; our own fetcher before a fake; by name within each.
    if req.render_js:
        serving = [p for p in serving if p.adapter.renders]
    return sorted(serving, key=lambda p: (p.adapter.renders, p.adapter.rank, p.name))


def build_web_plan(
    req: WebRequest,
    principal: Principal,
    catalog: Catalog,
    pool_for: Callable[[int, str], Pool | None],
) -> WebPlan:
    """Build the plan; LM-2001 when no profile serves the action."""
    profiles = candidates(req, catalog)
    if not profiles:
        wanted = "a renderer (render_js)" if req.render_js else f"{req.action}"
        raise InvalidRequest(f"No web profile serves {wanted}.")
    prepaid = principal.billing_mode == "prepaid"
    links = []
    worst = 0
    lock = ChainLock()
    for order, profile in enumerate(profiles, start=1):
        unit = profile.unit_for(req.action)
        assert unit is not None  # `candidates` keeps only the profiles that serve the action
        price = profile.prices[unit]
        boundary = billing_boundary(
            profile=profile,
            stem=f"{profile.name}:{unit}",
            group_id=principal.group_id,
            pool=team_pool(profile, principal.group_id, pool_for),
            platform_ok=platform_serves(profile, keyless=profile.adapter.keyless),
            prepaid=prepaid,
            worst_micro=price,  # a unit billed: what a success costs
            lock=lock,
        )
        if boundary.platform_pays:
            worst += price
        links.append(
            WebLink(
                order=order,
                profile=profile,
                unit=unit,
                price_micro=price,
                attempts=boundary.attempts,
                breaker_key=boundary.breaker_key,
                locked=boundary.locked,
                pool_exhausted_refusal=boundary.pool_exhausted_refusal,
            )
        )
    return WebPlan(
        links=tuple(links),
        budget_estimate_micro=with_margin_micro(worst, margin_pct=escrow_margin_pct()),
    )
