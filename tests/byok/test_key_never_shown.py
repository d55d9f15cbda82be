"""A team key never leaves its sealed column: not in logs, bodies, pages, metrics, DB or Redis."""

from __future__ import annotations

import subprocess

import httpx
import openai
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from byok.models import KeyPool, TeamKey
from tests.byok.helpers import Byok, team_keys
from tests.support.services import HAS_REDIS, IS_POSTGRES
from tests.support.usage import usage_rows

CANARY = "sk-canary-7Qx9LmZ2pV4"


def test_a_canary_team_key_appears_nowhere(stack):
    tenant = stack.tenant()
    ids = team_keys(stack, tenant, "stub-openai", [CANARY])
    seen: list[str] = []
    client = stack.openai(tenant)
    scripted = [
        {"kind": "401"},  # the stub echoes the key in its body and a header
        {"kind": "500", "times": 2},
        {"kind": "fail_before_first_token", "times": 2},
        {"kind": "fail_after_tokens", "after_tokens": 2},
    ]
    for fault in scripted:
        stack.stub.faults(fault)
        stack.gateway.reload()  # un-bench the key between rounds
        from tests.support.services import clear_shared_state

        clear_shared_state()
        for stream in (False, True):
            try:
                if stream:
                    for chunk in client.chat.completions.create(
                        model="gpt-4o-mini",
                        messages=[{"role": "user", "content": "x"}],
                        stream=True,
                    ):
                        seen.append(chunk.model_dump_json())
                else:
                    seen.append(
                        client.chat.completions.create(
                            model="gpt-4o-mini",
                            messages=[{"role": "user", "content": "x"}],
                        ).model_dump_json()
                    )
            except openai.APIError as exc:
                seen.append(str(exc))
                seen.append(str(getattr(exc, "body", "")))
                response = getattr(exc, "response", None)
                if response is not None:
                    seen.append(str(dict(response.headers)))
    assert any(c["key"] == CANARY for c in stack.stub.vendor_calls())  # it really was used
    usage_rows(group_id=tenant.group_id, expect=8)

    seen.append(Byok(stack, tenant).list().text)
    seen.append(httpx.get(f"{stack.url}/metrics").text)
    seen.append(stack.gateway.log())
    seen.append(admin_pages(ids[0]))
    seen.append(database_dump())
    seen.append(redis_dump())

    leaks = [i for i, text in enumerate(seen) if CANARY in text or CANARY[-10:] in text]
    assert leaks == []
    assert TeamKey.objects.get(pk=ids[0]).last4 == CANARY[-4:]


def admin_pages(key_id: int) -> str:
    user = get_user_model().objects.create_superuser("ops", "ops@example.invalid", "pw-ops-123")
    client = Client()
    client.force_login(user)
    team_key = TeamKey.objects.get(pk=key_id)
    pages = [
        "/django-admin/byok/teamkey/",
        f"/django-admin/byok/teamkey/{key_id}/change/",
        "/django-admin/byok/keypool/",
        f"/django-admin/byok/keypool/{KeyPool.objects.get(keys=team_key).pk}/change/",
    ]
    texts = []
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        text = response.content.decode()
        if page != "/django-admin/byok/keypool/":  # the pool list names pools, not keys
            assert team_key.label in text and team_key.last4 in text
        texts.append(text)
    return "\n".join(texts)


def database_dump() -> str:
    """Every table as text (the sealed column is ciphertext, so it cannot hold the canary)."""
    if IS_POSTGRES:
        db = connection.settings_dict
        return subprocess.run(
            [
                "pg_dump",
                "-h",
                db.get("HOST") or "127.0.0.1",
                "-U",
                db.get("USER") or "postgres",
                "--data-only",
                db["NAME"],
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type='table'")
        tables = [row[0] for row in cursor.fetchall()]
        parts = []
        for table in tables:
            cursor.execute(f'SELECT * FROM "{table}"')
            parts.append(repr(cursor.fetchall()))
    return "\n".join(parts)


def redis_dump() -> str:
    if not HAS_REDIS:
        return ""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    parts = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        assert isinstance(kind, bytes)  # no decode_responses
        kind = kind.decode()
        if kind == "string":
            parts.append(repr(client.get(key)))
        elif kind == "hash":
            parts.append(repr(client.hgetall(key)))
        elif kind == "zset":
            parts.append(repr(client.zrange(key, 0, -1)))
        elif kind == "stream":
            parts.append(repr(client.xrange(key)))
        elif kind == "list":
            parts.append(repr(client.lrange(key, 0, -1)))
        parts.append(repr(key))
    client.close()
    return "\n".join(parts)
