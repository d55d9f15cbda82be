"""Where a cached answer is kept: a key that holds no prompt text and never crosses accounts.

The key is `tollgate:cache:<account>:<digest>`: the account in clear (a tenant's purge is a scan of
its own prefix), and the SHA-256 of the scope and of what the vendor would be asked for. That
is the route, the chain of canonical model names the plan resolved (aliases resolved, so an
alias and its model share answers) and the client's body without what only labels or
transports it: the model names themselves, streaming switches, end-user ids and metadata
(a streamed and a whole request share one answer). Tools, tool choice, response format,
sampling parameters, `n`, seed and reasoning settings are all in the body, so all count.

The scope is the account's id and its creation time (an id a restored database hands out
again never finds another account's answers), narrowed within the account when the tenant
says so: the account (default), the group, the key, or the end caller's label
(cache/policy.py has who sets it).
"""

from __future__ import annotations

import hashlib

import orjson

from accounts.models import CacheScope
from core.response_cache import account_prefix
from gateway.auth import Principal

# Body fields that label or transport a request rather than shape its answer.
LABELS = frozenset(
    {
        "model",
        "fallback_model",
        "stream",
        "stream_options",
        "user",
        "safety_identifier",
        "metadata",
    }
)


def scope_of(principal: Principal, caller_label: str | None) -> str:
    """Return the scope an answer is shared in, always inside the caller's account."""
    scope = principal.cache_scope
    account = f"a{principal.account_id}@{principal.account_created_us}"
    if scope == CacheScope.GROUP:
        return f"{account}:g{principal.group_id}"
    if scope == CacheScope.KEY:
        # An internal caller acts for a group, with no key: its group is its narrowest scope.
        key = principal.api_key_id
        return f"{account}:k{key}" if key is not None else f"{account}:g{principal.group_id}"
    if scope == CacheScope.CALLER:
        # A request with no end caller shares only with others that have none, in its group.
        return f"{account}:g{principal.group_id}:c{caller_label or ''}"
    return account


def entry_key(
    principal: Principal,
    caller_label: str | None,
    *,
    route: str,
    chain: tuple[str, ...],
    body: dict,
) -> str:
    """Return the store key of a request's answer."""
    asked = {name: value for name, value in body.items() if name not in LABELS}
    material = orjson.dumps(
        [scope_of(principal, caller_label), route, chain, asked], option=orjson.OPT_SORT_KEYS
    )
    return f"{account_prefix(principal.account_id)}{hashlib.sha256(material).hexdigest()}"
