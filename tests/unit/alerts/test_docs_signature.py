"""docs/tenant-api.md's signature check, run as written against what Tollgate signs."""

from __future__ import annotations

import re
import time
from pathlib import Path

from core.webhook_signing import sign

ROOT = Path(__file__).resolve().parents[3]


def documented_verify():
    text = (ROOT / "docs" / "tenant-api.md").read_text()
    marker = "<!-- tested by: tests/unit/alerts/test_docs_signature.py -->"
    [block] = re.findall(re.escape(marker) + r"\n```python\n(.*?)```", text, re.S)
    scope: dict = {}
    exec(block, scope)  # noqa: S102 - our own doc's code
    return scope["verify"]


def test_the_documented_check_accepts_tollgates_signature_and_refuses_the_rest():
    verify = documented_verify()
    body = b'{"id":"alert_1","type":"alert.threshold"}'
    now = int(time.time())
    header = sign(body, secret="whsec_doc", timestamp=now)
    assert verify(body, header, "whsec_doc")
    assert not verify(body + b"\n", header, "whsec_doc")
    assert not verify(body, header, "whsec_other")
    assert not verify(body, sign(body, secret="whsec_doc", timestamp=now - 301), "whsec_doc")
