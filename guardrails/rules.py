"""What a guardrail may hold, by kind and by owner: checked on every write (the tenant API,
the admin, services), each refusal naming the field it is about.

Detectors and moderation guardrails are the operator's (they spend the platform's work or
keys on every request); a tenant defines custom and webhook ones. Only guardrails that know
where a finding is (detectors, custom) can redact it. A webhook's URL must reach a public
address, as alert webhooks' must (alerts/channels.py): checked here with the web fetcher's
rules and again by the gateway before each call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings

from guardrails.custom import PatternRejected, compile_custom
from guardrails.detectors import BUILTIN_KINDS
from guardrails.models import DEADLINE_MS_MAX, DEADLINE_MS_MIN, NAME_MAX_CHARS, Guardrail
from webfetch.addresses import HostRefused, allowed_networks, checked_address

NAME_RULE = re.compile(rf"[a-z0-9][a-z0-9_-]{{0,{NAME_MAX_CHARS - 1}}}")
TENANT_KINDS = (Guardrail.Kind.CUSTOM, Guardrail.Kind.WEBHOOK)
REDACTING_KINDS = (Guardrail.Kind.DETECTORS, Guardrail.Kind.CUSTOM)
CALLING_KINDS = (Guardrail.Kind.MODERATION, Guardrail.Kind.WEBHOOK)
NOT_HTTP = "A webhook URL is an http:// or https:// URL with a host."

# The fields each kind takes beyond the common ones; any other kind's must stay empty.
KIND_FIELDS = {
    Guardrail.Kind.DETECTORS: ("detectors",),
    Guardrail.Kind.CUSTOM: ("patterns", "words"),
    Guardrail.Kind.MODERATION: ("moderation_model", "moderation_threshold"),
    Guardrail.Kind.WEBHOOK: ("webhook_url",),
}


class GuardrailInvalid(ValueError):
    """A guardrail that cannot be saved: `field` names what is wrong, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def check_guardrail(guardrail: Guardrail) -> None:
    """Raise GuardrailInvalid for the first field of `guardrail` that breaks the rules."""
    if not NAME_RULE.fullmatch(guardrail.name or ""):
        raise GuardrailInvalid(
            "name",
            f"A name is 1-{NAME_MAX_CHARS} lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit.",
        )
    kind = guardrail.kind
    if kind not in Guardrail.Kind.values:
        raise GuardrailInvalid("kind", f"{kind!r} is not a kind of guardrail.")
    if guardrail.account_id is not None and kind not in TENANT_KINDS:
        raise GuardrailInvalid(
            "kind", f"A {kind} guardrail is the operator's; an account defines custom or webhook."
        )
    if guardrail.action == Guardrail.Action.REDACT and kind not in REDACTING_KINDS:
        raise GuardrailInvalid(
            "action", "Only detectors and custom guardrails can redact; block or flag."
        )
    if not DEADLINE_MS_MIN <= guardrail.deadline_ms <= DEADLINE_MS_MAX:
        raise GuardrailInvalid(
            "deadline_ms", f"Between {DEADLINE_MS_MIN} and {DEADLINE_MS_MAX} milliseconds."
        )
    for other, fields in KIND_FIELDS.items():
        for field in fields if other != kind else ():
            if getattr(guardrail, field) not in (None, "", []):
                raise GuardrailInvalid(field, f"Only a {other} guardrail takes {field}.")
    _KIND_CHECKS[kind](guardrail)


def _detectors(guardrail: Guardrail) -> None:
    chosen = guardrail.detectors
    if not isinstance(chosen, list) or not chosen:
        raise GuardrailInvalid("detectors", f"Name one or more of {', '.join(BUILTIN_KINDS)}.")
    unknown = [name for name in chosen if name not in BUILTIN_KINDS]
    if unknown:
        raise GuardrailInvalid(
            "detectors",
            f"{unknown[0]!r} is not a detector; they are {', '.join(BUILTIN_KINDS)}.",
        )
    if len(set(chosen)) != len(chosen):
        raise GuardrailInvalid("detectors", "Name each detector once.")


def _custom(guardrail: Guardrail) -> None:
    patterns, words = guardrail.patterns, guardrail.words
    for field, values in (("patterns", patterns), ("words", words)):
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise GuardrailInvalid(field, "A list of strings.")
    if not patterns and not words:
        raise GuardrailInvalid("patterns", "A custom guardrail needs patterns or words.")
    try:
        compile_custom(patterns, words)
    except PatternRejected as rejected:
        field = "words" if rejected.which.startswith("word") else "patterns"
        raise GuardrailInvalid(field, str(rejected)) from None


def _moderation(guardrail: Guardrail) -> None:
    if not guardrail.moderation_model.strip():
        raise GuardrailInvalid("moderation_model", "Name the moderation model (its alias).")
    threshold = guardrail.moderation_threshold
    if threshold is not None and not 0 < threshold <= 1:
        raise GuardrailInvalid(
            "moderation_threshold", "A category score above 0 and at most 1 (none: `flagged`)."
        )


def _webhook(guardrail: Guardrail) -> None:
    check_webhook_url(guardrail.webhook_url)


def check_webhook_url(url: str) -> None:
    """Refuse a URL that is not http(s), or whose host is, or resolves to, an address that is
    not globally reachable (unless inside TOLLGATE_WEB_ALLOW_NETS)."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GuardrailInvalid("webhook_url", NOT_HTTP)
    try:
        checked_address(url, allow=allowed_networks(settings.TOLLGATE["WEB_ALLOW_NETS"]))
    except HostRefused as refused:
        raise GuardrailInvalid("webhook_url", f"The webhook's {refused}.") from None


_KIND_CHECKS: dict[str, Callable[[Guardrail], None]] = {
    Guardrail.Kind.DETECTORS: _detectors,
    Guardrail.Kind.CUSTOM: _custom,
    Guardrail.Kind.MODERATION: _moderation,
    Guardrail.Kind.WEBHOOK: _webhook,
}
