"""What a key may call, against the live catalog: the one function enforcement and
/v1/models both use, so the list a key sees is exactly what it may call.

The rule (how entries match, how a key's and its group's access groups combine) is
accounts/model_access.py; this module only puts the catalog's offers in its terms.

- `usable_offers(name)`: the offers `name` resolves to (catalog.resolve: a canonical name's
  fan-out, an alias's, or a pinned `profile/name`) that the key's policy permits. A request
  is served by these, in the plan's order; none, for a name the catalog knows, is LM-1003.
- `listed_models()`: every canonical name and every alias whose `usable_offers` is not
  empty. Aliases are listed (with `alias_of`) because a request by alias is served the same
  offers as its model: listed and allowed agree for both.
"""

from __future__ import annotations

from accounts import model_access
from accounts.model_access import AccessPolicy, Offering
from gateway.catalog import Catalog, ModelOffer


def offering(offer: ModelOffer, catalog: Catalog) -> Offering:
    """Return an offer as the access rule sees it: its canonical name, the aliases the
    catalog resolves to it, its profile and the profile's provider kind."""
    aliases = tuple(a for a in offer.aliases if catalog.model_by_alias.get(a) == offer.name)
    return Offering(
        profile=offer.profile.name, provider=offer.profile.kind, model=offer.name, aliases=aliases
    )


def usable_offers(name: str, policy: AccessPolicy, catalog: Catalog) -> tuple[ModelOffer, ...]:
    """Return the offers of `name` the policy permits (all of them when unrestricted)."""
    return permitted(catalog.resolve(name), policy, catalog)


def permitted(
    offers: tuple[ModelOffer, ...], policy: AccessPolicy, catalog: Catalog
) -> tuple[ModelOffer, ...]:
    """Return those of a name's resolved `offers` the policy permits."""
    if policy.unrestricted:
        return offers
    return tuple(o for o in offers if policy.permits(offering(o, catalog)))


def listed_models(policy: AccessPolicy, catalog: Catalog) -> dict[str, str]:
    """Return each name the key may call -> its canonical model (itself for a canonical
    name, the model for an alias), sorted by name."""
    listed = {name: name for name in catalog.model_names() if usable_offers(name, policy, catalog)}
    for alias, model in catalog.aliases().items():
        if usable_offers(alias, policy, catalog):
            listed[alias] = model
    return dict(sorted(listed.items()))


EPOCH = "1970-01-01T00:00:00Z"  # Anthropic's list carries a creation time; we know none


def model_list(policy: AccessPolicy, catalog: Catalog, *, anthropic: bool = False) -> dict:
    """Return the body of GET /v1/models: `listed_models`, in OpenAI's list shape, or with
    `anthropic` in Anthropic's (`type`, `display_name`, `created_at`, and the page fields its
    SDK reads). Both carry `kind` and, for an alias, `alias_of`."""
    data = []
    for name, model in listed_models(policy, catalog).items():
        entry: dict = (
            {"type": "model", "id": name, "display_name": name, "created_at": EPOCH}
            if anthropic
            else {"id": name, "object": "model", "created": 0, "owned_by": "tollgate"}
        )
        entry["kind"] = catalog.kind_of(model)
        if name != model:
            entry["alias_of"] = model
        data.append(entry)
    if not anthropic:
        return {"object": "list", "data": data}
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def refusal_message(name: str, policy: AccessPolicy, catalog: Catalog) -> str:
    """Say that the key may not call `name`, and name what it may call, briefly."""
    allowed = sorted(set(listed_models(policy, catalog).values()))
    return model_access.refusal_message(name, allowed)
