"""The web plan: the ordered profiles an action walks, built once before any call.

Scrape: direct fetchers first (our own, then fakes), then renderers; `render_js` goes
straight to the renderers. Search: the search profiles. Within each group, by name. Each
profile is a link with a team attempt when the group has a pool for it, then a platform
attempt when platform serving is on, the profile allows it and any pool's fallback flag is
on; the chain lock of model plans holds here too (gateway/plan.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from byok.pools import Pool
from core.errors import InvalidRequest
from core.money import with_margin_micro
from gateway.auth import Principal
from gateway.catalog import Catalog, WebProfile
from gateway.plan import PLATFORM, TEAM, Attempt, team_pool
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
    margin_pct = settings.TOLLGATE["ESCROW_MARGIN_PCT"]
    prepaid = principal.billing_mode == "prepaid"
    links = []
    worst = 0
    chain_locked = False
    for order, profile in enumerate(profiles, start=1):
        unit = profile.unit_for(req.action)
        price = profile.prices[unit]
        pool = team_pool(profile, principal.group_id, pool_for)
        platform_ok = (
            settings.GATEWAY_PTB_ENABLED
            and profile.allows_platform
            and (profile.platform_key is not None or profile.adapter.keyless)
        )
        escrow = with_margin_micro(price, margin_pct=margin_pct)
        stem = f"{profile.name}:{unit}"
        attempts: list[Attempt] = []
        if pool is not None:
            attempts.append(Attempt(TEAM, f"{stem}:team", False, 0, pool))
            if pool.fallback and platform_ok:
                attempts.append(Attempt(PLATFORM, f"{stem}:platform-fallback", prepaid, escrow))
        elif platform_ok and not chain_locked:
            attempts.append(Attempt(PLATFORM, f"{stem}:platform", prepaid, escrow))
        if any(a.served_by == PLATFORM for a in attempts):
            worst += price
        links.append(
            WebLink(
                order=order,
                profile=profile,
                unit=unit,
                price_micro=price,
                attempts=tuple(attempts),
                breaker_key=(
                    f"{profile.name}#group:{principal.group_id}" if pool else profile.name
                ),
                locked=chain_locked and pool is None,
                pool_exhausted_refusal=pool is not None and not pool.fallback,
            )
        )
        if pool is not None and not pool.fallback:
            chain_locked = True
    return WebPlan(
        links=tuple(links), budget_estimate_micro=with_margin_micro(worst, margin_pct=margin_pct)
    )
