"""What a guardrail may hold, checked before any row is written: the fields of its kind
only, the operator's kinds refused to an account, redaction only where spans are known,
bounded deadlines, known detectors, compiled patterns, public webhook addresses."""

from __future__ import annotations

import pytest

from accounts.models import Account
from guardrails.models import Guardrail
from guardrails.rules import GuardrailInvalid, check_guardrail

ACCOUNT = Account(pk=7, name="t")


def refusal(**fields) -> tuple[str, str]:
    fields.setdefault("name", "g")
    with pytest.raises(GuardrailInvalid) as refused:
        check_guardrail(Guardrail(**fields))
    return refused.value.field, refused.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "detectors", "detectors": ["email", "credential"], "action": "redact"},
        {"kind": "custom", "patterns": [r"\bPRJ-\d{4}\b"], "account": ACCOUNT},
        {"kind": "custom", "words": ["bluebird"], "account": ACCOUNT, "action": "flag"},
        {"kind": "moderation", "moderation_model": "omni", "moderation_threshold": 1.0},
        {"kind": "webhook", "webhook_url": "https://93.184.215.14/check", "account": ACCOUNT},
    ],
)
def test_a_well_formed_guardrail_passes(fields):
    check_guardrail(Guardrail(name="ok-1", **fields))


def test_every_refusal_names_its_field_and_says_why():
    assert refusal(kind="detectors", detectors=[]) == (
        "detectors",
        "Name one or more of email, phone, payment_card, iban, us_ssn, ip_address, credential.",
    )
    assert refusal(kind="detectors", detectors=["email", "dna"]) == (
        "detectors",
        "'dna' is not a detector; they are email, phone, payment_card, iban, us_ssn, "
        "ip_address, credential.",
    )
    assert refusal(kind="detectors", detectors=["email", "email"]) == (
        "detectors",
        "Name each detector once.",
    )
    assert refusal(kind="detectors", detectors=["email"], account=ACCOUNT) == (
        "kind",
        "A detectors guardrail is the operator's; an account defines custom or webhook.",
    )
    assert refusal(kind="moderation", moderation_model="m", account=ACCOUNT)[0] == "kind"
    assert refusal(kind="moderation", moderation_model=" ") == (
        "moderation_model",
        "Name the moderation model (its alias).",
    )
    assert refusal(kind="moderation", moderation_model="m", moderation_threshold=0.0) == (
        "moderation_threshold",
        "A category score above 0 and at most 1 (none: `flagged`).",
    )
    assert refusal(kind="moderation", moderation_model="m", action="redact") == (
        "action",
        "Only detectors and custom guardrails can redact; block or flag.",
    )
    assert refusal(kind="custom") == ("patterns", "A custom guardrail needs patterns or words.")
    assert refusal(kind="custom", words=["x"], detectors=["email"]) == (
        "detectors",
        "Only a detectors guardrail takes detectors.",
    )
    assert refusal(kind="custom", words=["ok", ""]) == ("words", "word 2: is empty")
    assert refusal(kind="custom", words=["x"], deadline_ms=99) == (
        "deadline_ms",
        "Between 100 and 10000 milliseconds.",
    )
    assert refusal(kind="nope") == ("kind", "'nope' is not a kind of guardrail.")
    assert refusal(kind="custom", words=["x"], name="-dash")[0] == "name"
    assert refusal(kind="webhook", webhook_url="ftp://example.com/x") == (
        "webhook_url",
        "A webhook URL is an http:// or https:// URL with a host.",
    )
    assert refusal(kind="webhook", webhook_url="http://192.168.1.5/x") == (
        "webhook_url",
        "The webhook's host 192.168.1.5 is a private address, which Tollgate does not call.",
    )
