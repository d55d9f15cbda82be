from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.core.management import call_command

from accounts.models import Account, ApiKey, Group, TenantToken
from accounts.secrets import hash_secret
from billing.models import LedgerEntry, Wallet
from tests.support.processes import ROOT

pytestmark = pytest.mark.django_db


def test_create_tenant_prints_the_contract_fields_once(capsys):
    call_command(
        "create_tenant",
        "--name",
        "acme",
        "--budget-micro",
        "5000000",
        "--wallet-micro",
        "2500000",
        "--json",
    )
    data = json.loads(capsys.readouterr().out)

    assert {"account_id", "group_id", "api_token", "api_key"} <= set(data)
    account = Account.objects.get(pk=data["account_id"])
    assert account.billing_mode == "prepaid"
    assert Group.objects.get(pk=data["group_id"]).budget_max_micro == 5_000_000
    assert ApiKey.objects.filter(key_hash=hash_secret(data["api_key"])).exists()
    assert TenantToken.objects.filter(token_hash=hash_secret(data["api_token"])).exists()
    wallet = Wallet.objects.get(account=account)
    assert wallet.balance_micro == 2_500_000
    assert list(LedgerEntry.objects.filter(wallet=wallet).values_list("kind", "amount_micro")) == [
        ("opening", 2_500_000)
    ]


def test_create_tenant_invoiced(capsys):
    call_command("create_tenant", "--name", "inv", "--invoiced", "--json")
    data = json.loads(capsys.readouterr().out)
    assert Account.objects.get(pk=data["account_id"]).billing_mode == "invoiced"


def run_settings(**env):
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("TOLLGATE_", "GATEWAY_", "DATABASE_URL", "REDIS_URL", "SEALING_KEYS", "SECRET_KEY")
        )
    }
    clean.update(env)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ.setdefault("
            "'DJANGO_SETTINGS_MODULE','config.settings'); django.setup()",
        ],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TOLLGATE_NO_SUCH_THING": "1"}, "TOLLGATE_NO_SUCH_THING"),
        ({"TOLLGATE_MAX_BODY_BYTES": "lots"}, "TOLLGATE_MAX_BODY_BYTES"),
        ({"GATEWAY_INTERNAL_TOKEN": "too-short"}, "GATEWAY_INTERNAL_TOKEN"),
        ({"DATABASE_URL": "postgres://x@127.0.0.1/db", "SECRET_KEY": "k"}, "SEALING_KEYS"),
        (
            {
                "DATABASE_URL": "postgres://x@127.0.0.1/db",
                "SECRET_KEY": "k",
                "SEALING_KEYS": "v1:short",
            },
            "SEALING_KEYS",
        ),
        ({"TOLLGATE_CALLER_WINDOW": "week"}, "TOLLGATE_CALLER_WINDOW"),
        (
            {
                "DATABASE_URL": "postgres://x@127.0.0.1/db",
                "SECRET_KEY": "k",
                "SEALING_KEYS": "v1:" + "A" * 43 + "=",
            },
            "TOLLGATE_CALLER_KEY",
        ),
        (
            {
                "DATABASE_URL": "postgres://x@127.0.0.1/db",
                "SECRET_KEY": "k",
                "SEALING_KEYS": "v1:" + "A" * 43 + "=",
                "TOLLGATE_CALLER_KEY": "off",
            },
            "TOLLGATE_RECEIPT_KEYS",
        ),
        (
            {
                "DATABASE_URL": "postgres://x@127.0.0.1/db",
                "SECRET_KEY": "k",
                "SEALING_KEYS": "v1:" + "A" * 43 + "=",
                "TOLLGATE_CALLER_KEY": "off",
                "TOLLGATE_RECEIPT_KEYS": "r1:short",
            },
            "TOLLGATE_RECEIPT_KEYS",
        ),
    ],
)
def test_bad_settings_stop_the_process_naming_the_variable(env, named, tmp_path):
    result = run_settings(TOLLGATE_VAR_DIR=str(tmp_path), **env)
    assert result.returncode != 0
    assert named in result.stderr


def test_embedded_defaults_need_no_variables(tmp_path):
    result = run_settings(TOLLGATE_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "caller_key").read_text()) >= 43  # caller governance is on


def test_production_runs_without_caller_labels_only_when_told_so(tmp_path):
    production = {
        "DATABASE_URL": "postgres://x@127.0.0.1/db",
        "SECRET_KEY": "k",
        "SEALING_KEYS": "v1:" + "A" * 43 + "=",
        "TOLLGATE_RECEIPT_KEYS": "r1:" + "B" * 43 + "=",
        "TOLLGATE_VAR_DIR": str(tmp_path / "absent"),
    }
    assert run_settings(**production, TOLLGATE_CALLER_KEY="off").returncode == 0
    assert run_settings(**production, TOLLGATE_CALLER_KEY="k" * 40).returncode == 0


def test_seeding_the_demo_again_mints_a_working_key_and_revokes_the_old_ones(capsys):
    call_command("seed_demo", "--stub-url", "http://127.0.0.1:9")
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    call_command("seed_demo", "--stub-url", "http://127.0.0.1:9")
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    old = ApiKey.objects.get(key_hash=hash_secret(first["api_key"]))
    new = ApiKey.objects.get(key_hash=hash_secret(second["api_key"]))
    assert old.revoked_at is not None and new.revoked_at is None
    assert old.group_id == new.group_id == second["group_id"]
    assert Wallet.objects.get(account_id=second["account_id"]).balance_micro == 100_000_000
