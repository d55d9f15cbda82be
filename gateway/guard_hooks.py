"""Webhook guardrails: one signed POST to the operator's or the account's endpoint (a Lakera,
a self-hosted Presidio, anything that answers the protocol), within the guardrail's deadline.

The call: `POST webhook_url` with the JSON body
`{"guardrail": name, "phase": "input", "request_id": ..., "texts": [...]}` (the prompt texts
gateway/shapes/texts.py walks, in its order) and
`X-Tollgate-Guardrail-Signature: t=<unix seconds>,v1=<hex>`, signed as alert webhooks are
(core.webhook_signing.sign: HMAC-SHA256 of "<t>." and the body, under the guardrail's secret). The
endpoint answers 2xx with `{"flagged": bool, "matches": int}` (`matches` optional). Anything
else, or nothing within `deadline_ms` (the lookup included), is a failure, never a verdict:
`CheckOutcome.failure` says which, and the guardrail's fail mode decides what it means
(gateway/guarding.py).

A tenant's URL is untrusted (server-side request forgery): its host is resolved once and
every address checked (webfetch.addresses.checked_address, the check its URL passed when
saved), and the request goes to that address (the name kept in the Host header and as the
TLS server name, so the certificate is verified for the name). A name rebound after the
check is never asked again. The operator's URL is called as configured. Both ride the
runtime's pooled session (its connections are keyed by address and server name, so a pinned
call never reuses a connection verified for another name). Redirects are not followed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
import orjson

from core.webhook_signing import sign
from webfetch.addresses import HostRefused, allowed_networks, checked_address
from webfetch.checked_http import pinned

if TYPE_CHECKING:
    from guardrails.selectors import GuardrailSpec

SIGNATURE_HEADER = "X-Tollgate-Guardrail-Signature"
ANSWER_MAX_BYTES = 64 * 1024  # `{"flagged": true, "matches": 3}` needs 32


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What a check that calls out said (a webhook, a moderation model): flagged and how many
    values, or why it said nothing usable."""

    flagged: bool = False
    matches: int = 0
    failure: str = ""  # "" when it answered; else why not, for the client and the log
    kinds: tuple[str, ...] = ()  # what it flagged, when it says (a moderation's categories)
    check: str = ""  # the request id of a check made as a request of its own (a moderation)

    @property
    def failed(self) -> bool:
        return bool(self.failure)


def _failed(why: str) -> CheckOutcome:
    return CheckOutcome(failure=why)


async def check_with_webhook(
    spec: GuardrailSpec,
    *,
    phase: str,
    texts: list[str],
    request_id: str,
    session: aiohttp.ClientSession,
    allow_nets: tuple[str, ...] = (),
) -> CheckOutcome:
    """Ask the guardrail's endpoint about `texts`; never raises for the endpoint's faults.

    `allow_nets` (TOLLGATE_WEB_ALLOW_NETS) are the non-public networks a tenant's URL may
    still reach; the operator's URL is not checked."""
    body = orjson.dumps(
        {"guardrail": spec.name, "phase": phase, "request_id": request_id, "texts": texts}
    )
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(body, secret=spec.webhook_secret, timestamp=int(time.time())),
    }
    try:
        async with asyncio.timeout(spec.deadline_ms / 1000):
            url, server_hostname = spec.webhook_url, None
            if not spec.operators:
                url, server_hostname = await _pinned(url, headers, allow_nets)
            async with session.post(
                url,
                data=body,
                headers=headers,
                server_hostname=server_hostname,
                allow_redirects=False,
            ) as response:
                if not 200 <= response.status < 300:
                    return _failed(f"its endpoint answered {response.status}")
                answer = await _read_bounded(response)
    except TimeoutError:
        return _failed(f"no answer within {spec.deadline_ms} ms")
    except HostRefused:
        return _failed("its endpoint's address is not one Tollgate calls")
    except (aiohttp.ClientError, OSError):
        return _failed("its endpoint could not be reached")
    return _parsed(answer)


async def _pinned(
    url: str, headers: dict[str, str], allow_nets: tuple[str, ...]
) -> tuple[str, str | None]:
    """Resolve and check a tenant's URL once; return the URL naming the address checked and
    the TLS server name (None for http). Sets the Host header the URL no longer carries."""
    address = await asyncio.to_thread(checked_address, url, allow=allowed_networks(allow_nets))
    target, host, extensions = pinned(url, address)
    headers["Host"] = host
    return target, extensions.get("sni_hostname")


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    """The answer's body, or its first ANSWER_MAX_BYTES + 1 bytes (too long to be one)."""
    answer = b""
    while len(answer) <= ANSWER_MAX_BYTES:
        chunk = await response.content.read(ANSWER_MAX_BYTES + 1 - len(answer))
        if not chunk:
            break
        answer += chunk
    return answer


def _parsed(answer: bytes) -> CheckOutcome:
    """The endpoint's verdict, or a failure for an answer outside the protocol."""
    try:
        data = orjson.loads(answer) if len(answer) <= ANSWER_MAX_BYTES else None
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("flagged"), bool):
        return _failed('its answer was not {"flagged": true|false}')
    flagged = data["flagged"]
    matches = data.get("matches", 1 if flagged else 0)
    if isinstance(matches, bool) or not isinstance(matches, int) or matches < 0:
        return _failed('its answer\'s "matches" was not a count')
    # A flag is at least one finding; a clean answer none, whatever count it gave.
    return CheckOutcome(flagged=flagged, matches=max(matches, 1) if flagged else 0)
