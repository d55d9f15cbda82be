"""Rotating a key from its edit page in a real browser, at a desktop and a phone width,
against a real gateway: the new secret shown once, the old one served through its grace; a
second rotation with no grace refuses every earlier secret at once."""

from __future__ import annotations

import dataclasses

import openai
from django.contrib.auth import get_user_model

from accounts.models import ApiKey, Membership
from accounts.secrets import hash_secret
from audit.models import AuditEntry
from tests.dashboard.test_browser import sign_in
from tests.support.browser import requires_chromium

pytestmark = requires_chromium
HELLO = [{"role": "user", "content": "hello"}]


def served(stack, tenant, secret: str) -> bool:
    client = stack.openai(dataclasses.replace(tenant, api_key=secret))
    try:
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO, max_tokens=5)
    except openai.AuthenticationError as refused:
        assert isinstance(refused.body, dict), refused.body
        assert refused.body["code"] == "LM-1001"
        return False
    return True


def rotate(page, tenant, grace: str) -> str:
    page.click('nav >> text="Keys"')
    page.click(f"tr[data-key='{tenant.api_key_id}'] >> text=Edit")
    page.select_option("#rotate-key select[name=grace_s]", label=grace)
    page.click("#rotate-key button[type=submit]")
    return page.inner_text("#secret")


def test_rotate_a_key_with_a_grace_then_again_with_none(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    assert served(stack, tenant, tenant.api_key)

    first = rotate(page, tenant, "1 hour")

    page.shot("3-rotated")
    assert first.startswith("tg-") and first != tenant.api_key
    assert "keeps working until" in page.inner_text("#grace")
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]
    assert served(stack, tenant, first)
    assert served(stack, tenant, tenant.api_key)  # in its grace

    page.click("text=Back to the keys")
    status = page.inner_text(f"tr[data-key='{tenant.api_key_id}'] .status")
    assert status.startswith("active; old secret until ")
    page.click(f"tr[data-key='{tenant.api_key_id}'] >> text=Edit")
    assert "rotating again ends it now" in page.inner_text("#rotate-key")
    page.shot("4-edit-in-grace")
    second = rotate(page, tenant, "None: the old secret stops working now")

    assert page.inner_text("#grace") == "The old secret is refused from now on."
    assert [served(stack, tenant, s) for s in (tenant.api_key, first, second)] == [
        False,
        False,
        True,
    ]
    actions = AuditEntry.objects.filter(account_id=tenant.account_id, action="key.rotate")
    assert [(e.actor_kind, e.after["grace_s"]) for e in actions.order_by("seq")] == [
        ("user", 3600),
        ("user", 0),
    ]


def test_a_viewer_sees_no_rotate_form_and_cannot_post_one(stack, client):
    tenant = stack.tenant()
    viewer = get_user_model().objects.create_user("rotation-viewer", password="x" * 12)
    Membership.objects.create(account_id=tenant.account_id, user=viewer, role="viewer")
    client.force_login(viewer)
    edit = f"/dashboard/{tenant.account_id}/keys/{tenant.api_key_id}/"

    assert 'id="rotate-key"' not in client.get(edit).content.decode()
    assert client.post(edit + "rotate/", {"grace_s": "0"}).status_code == 403
    assert client.get(edit + "rotate/").status_code == 405
    assert ApiKey.objects.get(pk=tenant.api_key_id).key_hash == hash_secret(tenant.api_key)
