"""The SigV4 check every call to the stub's Bedrock runtime (stubvendor/bedrock.py) passes.

Signature
---------
Every call must be signed with AWS SigV4 (service ``bedrock``, any region); the stub
recomputes the signature with botocore over the method, the raw path, the query, the
headers the ``Authorization`` header names (``SignedHeaders``) and the body, and refuses:

* no (or a non-SigV4) ``Authorization`` header: 403 ``{"message": "Missing
  Authentication Token"}``;
* an access key id it does not know: 403 ``{"message": "The security token included in
  the request is invalid."}`` (also for a session token other than the one it knows);
* a scope whose service is not ``bedrock``: 403 ``Credential should be scoped to correct
  service: 'bedrock'.``;
* an ``X-Amz-Date`` more than 15 minutes off: 403 ``Signature expired: ...``;
* any other mismatch (a tampered body, path or signed header, a wrong secret, an
  ``X-Amz-Content-SHA256`` that is not the body's): 403 ``{"message": "The request
  signature we calculated does not match the signature you provided. Check your AWS
  Secret Access Key and signing method. Consult the service documentation for details."}``.

The known credentials are ``$STUB_AWS_CREDENTIALS`` (comma separated
``ACCESS_KEY_ID:SECRET[:SESSION_TOKEN]``), by default the one test pair
``TEST_CREDENTIALS`` = ``AKIASTUBTESTKEY00001:stub/Secret+Key/For/Tests/0000000000000``.
Errors carry ``x-amzn-ErrorType`` (``AccessDeniedException``, ``ValidationException``,
``ThrottlingException``, ...).  The call is recorded (``shape: "bedrock"``, ``key``: the
access key id, ``region``: the signing region, ``max_tokens``:
``inferenceConfig.maxTokens``, ``user`` null) before the check, so a refused call shows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import re

from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

TEST_CREDENTIALS = "AKIASTUBTESTKEY00001:stub/Secret+Key/For/Tests/0000000000000"
SIGNING_SERVICE = "bedrock"
MAX_CLOCK_SKEW = dt.timedelta(minutes=15)


_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/"
    r"(?P<service>[^/,\s]+)/aws4_request,\s*SignedHeaders=(?P<headers>[a-z0-9;\-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})"
)
MISSING_TOKEN = "Missing Authentication Token"
INVALID_TOKEN = "The security token included in the request is invalid."
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check "
    "your AWS Secret Access Key and signing method. Consult the service documentation for "
    "details."
)


def known_credentials() -> dict[str, Credentials]:
    """The credentials the stub accepts, by access key id (``$STUB_AWS_CREDENTIALS``)."""
    raw = os.environ.get("STUB_AWS_CREDENTIALS") or TEST_CREDENTIALS
    known = {}
    for entry in raw.split(","):
        parts = entry.strip().split(":")
        if len(parts) in (2, 3):
            known[parts[0]] = Credentials(*parts)
    return known


def check_signature(request: web.Request, body: bytes) -> tuple[str | None, str | None, str | None]:
    """Return (access key id, region, refusal message or None) for a call's SigV4 signature."""
    match = _AUTHORIZATION.fullmatch(request.headers.get("Authorization", "").strip())
    if match is None:
        return None, None, MISSING_TOKEN
    key, region = match["key"], match["region"]
    credentials = known_credentials().get(key)
    token = request.headers.get("X-Amz-Security-Token")
    if credentials is None or token != credentials.token:
        return key, region, INVALID_TOKEN
    if match["service"] != SIGNING_SERVICE:
        return key, region, f"Credential should be scoped to correct service: '{SIGNING_SERVICE}'."
    stamp = request.headers.get("X-Amz-Date", "")
    try:
        signed_at = dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return key, region, SIGNATURE_MISMATCH
    now = dt.datetime.now(dt.UTC)
    if abs(now - signed_at) > MAX_CLOCK_SKEW:
        return key, region, f"Signature expired: {stamp} is now earlier than the allowed window."
    content_hash = request.headers.get("X-Amz-Content-SHA256")
    if content_hash is not None and content_hash != hashlib.sha256(body).hexdigest():
        return key, region, SIGNATURE_MISMATCH
    names = match["headers"].split(";")
    if any(name not in request.headers for name in names):
        return key, region, SIGNATURE_MISMATCH
    signed = AWSRequest(
        method=request.method,
        url=f"http://{request.host}{request.raw_path}",
        data=body,
        headers={name: request.headers[name] for name in names},
    )
    signed.context["timestamp"] = stamp
    signer = SigV4Auth(credentials, match["service"], region)
    expected = signer.signature(
        signer.string_to_sign(signed, signer.canonical_request(signed)), signed
    )
    if match["date"] != stamp[:8] or not hmac.compare_digest(expected, match["signature"]):
        return key, region, SIGNATURE_MISMATCH
    return key, region, None
