"""`seed_demo` (make run) prints an operator login and the demo owner's dashboard login, with
fresh passwords on every run."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from accounts.models import Membership

pytestmark = pytest.mark.django_db


def seed(capsys) -> dict:
    call_command("seed_demo", "--stub-url", "http://127.0.0.1:9")
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_first_run_prints_a_superuser_and_the_demo_owner_with_working_passwords(capsys):
    demo = seed(capsys)

    operator = authenticate(username=demo["operator_username"], password=demo["operator_password"])
    owner = authenticate(username=demo["owner_username"], password=demo["owner_password"])
    assert demo["operator_username"] == "operator"
    assert (operator.is_staff, operator.is_superuser) == (True, True)
    assert demo["owner_username"] == "demo-owner"
    assert (owner.is_staff, owner.is_superuser) == (False, False)
    membership = Membership.objects.get(user=owner)
    assert (membership.account_id, membership.role) == (demo["account_id"], "owner")


def test_another_run_replaces_both_passwords(capsys):
    first = seed(capsys)
    second = seed(capsys)

    for who in ("operator", "owner"):
        username = second[f"{who}_username"]
        assert username == first[f"{who}_username"]
        assert second[f"{who}_password"] != first[f"{who}_password"]
        assert authenticate(username=username, password=first[f"{who}_password"]) is None
        assert authenticate(username=username, password=second[f"{who}_password"]) is not None
