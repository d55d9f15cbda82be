"""The request log keeps what the client was told (issue 39): a misspelt model sent with the
official OpenAI SDK to a real gateway, then the same message in the usage row, the tenant
API, the dashboard's request page; the refusal listed as a refusal (usage list, receipts),
never as a $0.00 charge; and the typo grouped under unknown models on the charts page."""

from __future__ import annotations

import html
import re

import openai
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import Membership
from billing.models import Receipt
from tests.support.usage import usage_rows
from tests.support.waits import wait_until

PROMPT = [{"role": "user", "content": "hi"}]


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


@pytest.fixture
def misspelt(stack):
    """A tenant that asked for "gpt-4o-mni" once (refused) and "gpt-4o-mini" once (served)."""
    tenant = stack.tenant()
    client = stack.openai(tenant)
    served = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=PROMPT)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-4o-mni", messages=PROMPT)
    told = caught.value.body["message"]
    request_id = caught.value.response.headers["x-tollgate-request-id"]
    rows = usage_rows([request_id, served.headers["x-tollgate-request-id"]], expect=2)
    dashboard = Client()
    dashboard.force_login(Membership.objects.get(account_id=tenant.account_id).user)
    return tenant, told, request_id, rows, dashboard


def test_the_usage_row_and_api_keep_the_message_the_sdk_read(stack, misspelt):
    tenant, told, request_id, rows, _ = misspelt
    assert told.startswith("Unknown model 'gpt-4o-mni'. Did you mean 'gpt-4o-mini'?")
    [row] = [r for r in rows if r.request_id == request_id]
    assert (row.status, row.error_code, row.error_message) == (400, "LM-2001", told)
    assert stack.stub.vendor_calls()[-1]["model"] == "gpt-4o-mini"  # only the served one

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    detail = api.get(f"/api/usage/requests/{request_id}").json()
    listed = api.get("/api/usage").json()["results"]
    assert (detail["error_code"], detail["error_message"]) == ("LM-2001", told)
    assert [r["error_message"] for r in listed if r["request_id"] == request_id] == [told]
    assert [r["error_message"] for r in listed if r["request_id"] != request_id] == [""]

    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("op", "op@example.invalid"))
    page = operator.get(f"/django-admin/usage/usagelog/{row.pk}/change/").content.decode()
    shown = page.split("field-error_message")[1].split('<div class="readonly">')[1]
    assert text_of(shown.split("</div>")[0]) == told


def test_the_dashboard_shows_the_message_and_lists_the_refusal_as_one(misspelt):
    tenant, told, request_id, _, dashboard = misspelt
    base = f"/dashboard/{tenant.account_id}"

    detail = dashboard.get(f"{base}/usage/{request_id}/").content.decode()
    assert text_of(re.search(r'<span id="error-message"[^>]*>(.*?)</span>', detail)[1]) == told
    assert "refused: LM-2001, nothing charged" in text_of(detail.split('id="spend">')[1])

    listing = dashboard.get(f"{base}/usage/").content.decode()
    row = listing.split(f'data-request="{request_id}"')[1].split("</tr>")[0]
    assert text_of(row.split('class="num cost">')[1].split("</td>")[0]) == "refused: LM-2001"
    assert told in text_of(row.split('class="error-text">')[1].split("</span>")[0])


def test_a_refused_requests_receipt_reads_no_charge(misspelt):
    tenant, _, request_id, _, dashboard = misspelt
    base = f"/dashboard/{tenant.account_id}"
    receipt = wait_until(
        lambda: Receipt.objects.filter(request_id=request_id).first(), what="the receipt"
    )
    assert (receipt.kind, receipt.cost_micro, receipt.bandwidth_micro) == ("charge", 0, 0)

    listing = dashboard.get(f"{base}/receipts/").content.decode()
    row = listing.split(f'data-request="{request_id}"')[1].split("</tr>")[0]
    assert text_of(row.split('class="kind">')[1].split("</td>")[0]) == "refused"
    assert text_of(row.split('class="num amount">')[1].split("</td>")[0]) == "no charge: LM-2001"
    detail = dashboard.get(f"{base}/receipts/{request_id}/").content.decode()
    assert "refused — no charge (LM-2001)" in text_of(detail.split("<h2")[1].split("</h2>")[0])


def test_the_charts_group_the_misspelt_model_as_unknown(misspelt):
    tenant, _, _, _, dashboard = misspelt

    page = dashboard.get(f"/dashboard/{tenant.account_id}/charts/").content.decode()

    table = page.split('id="per-model"')[1].split("</table>")[0]
    models = [text_of(m) for m in re.findall(r"<tr[^>]*><td>(.*?)</td>", table)]
    assert models == ["gpt-4o-mini", "unknown models (1 request)"]
    assert 'title="Names no model answers to, refused with LM-2001: gpt-4o-mni"' in table
