"""Caller labels: the keyed pseudonym, never the raw end-user id, is stored, limited on and
forwarded; without a caller key nothing is forwarded and one warning says so."""

from __future__ import annotations

import uuid

import pytest
from django.core.management import CommandError, call_command

from tests.support.stacks import own_stack
from tests.support.usage import chat, database_dump, usage_rows

CALLER_KEY = "caller-key-for-tests-5b1e0c"
PROMPT = [{"role": "user", "content": "hello there"}]


def label(raw_id: str) -> str:
    from usage.pseudonym import label_for, window_id

    return label_for(raw_id, key=CALLER_KEY, window=window_id(window="month"))


@pytest.fixture(scope="module")
def keyed_gateway(gateway_factory):
    gateway = gateway_factory(TOLLGATE_CALLER_KEY=CALLER_KEY)
    yield gateway
    gateway.stop()


@pytest.fixture
def keyed(transactional_db, keyed_gateway, stub):
    return own_stack(keyed_gateway, stub)


@pytest.fixture
def keyed_fresh_window(transactional_db, spawn_gateway, stub, rate_window):
    """A keyed gateway of the test's own, in its first rate window: for limit tests."""
    return own_stack(spawn_gateway(TOLLGATE_CALLER_KEY=CALLER_KEY, **rate_window.env), stub)


def test_label_is_stored_and_forwarded_in_each_vendors_field_never_the_raw_id(keyed):
    tenant = keyed.tenant()
    raw = {
        name: f"{name}-{uuid.uuid4().hex[:10]}@example.com"
        for name in ("openai_user", "anthropic_user", "header_user")
    }

    openai_reply, _ = chat(
        keyed.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT, "user": raw["openai_user"]}
    )
    anthropic_reply, _ = chat(
        keyed.url,
        tenant,
        {
            "model": "claude-3-5-haiku",
            "max_tokens": 50,
            "messages": PROMPT,
            "metadata": {"user_id": raw["anthropic_user"]},
        },
        path="/v1/messages",
    )
    header_reply, _ = chat(
        keyed.url,
        tenant,
        {"model": "gpt-4o-mini", "messages": PROMPT},
        headers={"X-Tollgate-Caller": raw["header_user"]},
    )

    assert [r.status_code for r in (openai_reply, anthropic_reply, header_reply)] == [200] * 3
    expected = [label(raw["openai_user"]), label(raw["anthropic_user"]), label(raw["header_user"])]
    assert all(value.startswith("c_") and len(value) == 26 for value in expected)
    assert [c["user"] for c in keyed.stub.vendor_calls()] == expected
    ids = [r.headers["x-request-id"] for r in (openai_reply, anthropic_reply, header_reply)]
    rows = {row.request_id: row.caller_label for row in usage_rows(ids, expect=3)}
    assert [rows[i] for i in ids] == expected
    replies = (openai_reply, anthropic_reply, header_reply)
    assert [r.headers["x-tollgate-caller-label"] for r in replies] == expected
    dump, log, calls = database_dump(), keyed.gateway.log(), str(keyed.stub.calls())
    for raw_id in raw.values():
        assert raw_id not in dump
        assert raw_id not in log
        assert raw_id not in calls


def test_label_is_stable_for_one_user_and_differs_between_users(keyed):
    tenant = keyed.tenant()

    for user in ("alice", "alice", "bob"):
        chat(keyed.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT, "user": user})

    assert [c["user"] for c in keyed.stub.vendor_calls()] == [
        label("alice"),
        label("alice"),
        label("bob"),
    ]
    assert label("alice") != label("bob")


def test_one_callers_rate_limit_leaves_another_callers_untouched(keyed_fresh_window):
    from accounts.models import Group

    keyed = keyed_fresh_window
    tenant = keyed.tenant()
    Group.objects.filter(pk=tenant.group_id).update(caller_rpm_limit=2)
    keyed.gateway.reload()

    def ask(user: str) -> tuple[int, str | None]:
        response, _ = chat(
            keyed.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT, "user": user}
        )
        return response.status_code, response.json().get("error", {}).get("code")

    alice = [ask("alice") for _ in range(3)]
    bob = [ask("bob") for _ in range(2)]

    assert alice == [(200, None), (200, None), (429, "LM-3001")]
    assert bob == [(200, None), (200, None)]
    assert [c["user"] for c in keyed.stub.vendor_calls()] == [label("alice")] * 2 + [
        label("bob")
    ] * 2


@pytest.fixture
def unkeyed(transactional_db, spawn_gateway, stub, rate_window):
    return own_stack(spawn_gateway(TOLLGATE_CALLER_KEY="off", **rate_window.env), stub)


def test_without_a_caller_key_nothing_is_forwarded_spend_stays_in_the_group_and_one_warning(
    unkeyed,
):
    from accounts.models import Group

    stack = unkeyed
    tenant = stack.tenant()
    Group.objects.filter(pk=tenant.group_id).update(caller_rpm_limit=1)
    stack.gateway.reload()

    replies = [
        chat(stack.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT, "user": user})[0]
        for user in ("carol-raw-id-1", "carol-raw-id-1", "dave-raw-id-2")
    ]

    assert [r.status_code for r in replies] == [200, 200, 200]  # no per-caller bucket
    # Not silently: each answer says its end-user id was dropped.
    assert [r.headers["x-tollgate-caller-label"] for r in replies] == ["dropped"] * 3
    assert [c["user"] for c in stack.stub.vendor_calls()] == [None, None, None]
    rows = usage_rows([r.headers["x-request-id"] for r in replies], expect=3)
    assert [row.caller_label for row in rows] == ["", "", ""]
    log = stack.gateway.log()
    assert log.count("TOLLGATE_CALLER_KEY is not set") == 1
    assert "carol-raw-id-1" not in log and "carol-raw-id-1" not in database_dump()


def test_rotating_the_caller_key_refuses_without_confirm(capsys):
    with pytest.raises(CommandError, match="--confirm"):
        call_command("rotate_caller_key")
    assert capsys.readouterr().out == ""


def test_rotating_the_caller_key_prints_a_fresh_key_and_how_to_deploy_it(capsys):
    call_command("rotate_caller_key", "--confirm")
    first = capsys.readouterr().out
    call_command("rotate_caller_key", "--confirm")
    second = capsys.readouterr().out

    keys = [
        line.split("=", 1)[1]
        for out in (first, second)
        for line in out.splitlines()
        if line.startswith("TOLLGATE_CALLER_KEY=")
    ]
    assert len(keys) == 2 and keys[0] != keys[1] and all(len(k) >= 43 for k in keys)
    assert "restart" in first and "nothing has changed yet" in first


def test_one_callers_token_spend_leaves_another_callers_token_limit_untouched(
    keyed_fresh_window,
):
    from accounts.models import Group

    keyed = keyed_fresh_window
    tenant = keyed.tenant()
    Group.objects.filter(pk=tenant.group_id).update(caller_tpm_limit=15)
    keyed.gateway.reload()

    def ask(user: str) -> tuple[int, str | None]:
        response, _ = chat(
            keyed.url, tenant, {"model": "gpt-4o-mini", "messages": PROMPT, "user": user}
        )
        return response.status_code, response.json().get("error", {}).get("code")

    # Each answer costs 2 prompt + 8 completion tokens: alice passes 15 on her second.
    alice = [ask("alice") for _ in range(3)]
    bob = ask("bob")

    assert alice == [(200, None), (200, None), (429, "LM-3002")]
    assert bob == (200, None)
