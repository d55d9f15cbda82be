"""The operator's admin shows SCIM's tokens, users and groups, read-only, never a hash."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from scim.models import ScimGroup, ScimToken, ScimUser
from tests.scim.support import directory

pytestmark = pytest.mark.django_db


def test_scim_rows_open_search_and_filter_read_only_without_a_hash():
    d = directory()
    d.create_group("eng", d.create_user("ada@example.com")["id"])
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("root", "r@x.invalid", "pw"))
    token = ScimToken.objects.get()

    for model in (ScimToken, ScimUser, ScimGroup):
        base = f"/django-admin/scim/{model._meta.model_name}/"
        row = model.objects.get()
        pages = [
            operator.get(base),
            operator.get(base, {"q": "e"}),
            operator.get(f"{base}{row.pk}/change/"),
        ]
        for page in pages:
            html = page.content.decode()
            assert page.status_code == 200, (base, html[:300])
            assert token.token_hash not in html and d.token not in html
        assert "Save" not in pages[-1].content.decode()  # read-only
        assert operator.post(f"{base}{row.pk}/delete/", {"post": "yes"}).status_code == 403
