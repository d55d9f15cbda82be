"""Every process of one bench run gets the same keys: the traced and bare gateways read the
platform keys the seed sealed for the first one (with keys of their own they read none, and
every traced request was refused LM-3021, "platform serving is off")."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
KEYS = ("SECRET_KEY", "SEALING_KEYS", "TOLLGATE_CALLER_KEY", "TOLLGATE_RECEIPT_KEYS")


def test_the_processes_of_one_run_share_its_keys(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))  # run.py imports its siblings as top-level modules
    run = importlib.import_module("run")
    database, redis = "postgres://bench@127.0.0.1/bench", "redis://127.0.0.1:6379/6"

    first = run.child_env(str(tmp_path / "var"), database, redis)
    traced = {**run.child_env(str(tmp_path / "var"), database, redis), "OTEL_SERVICE_NAME": "t"}

    assert all(first[key] for key in KEYS)
    assert {key: traced[key] for key in KEYS} == {key: first[key] for key in KEYS}


def test_the_rules_floor_runs_only_on_postgresql_and_redis(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    run = importlib.import_module("run")
    rules = {"rules-openai", "rules-openai-stream", "rules-anthropic", "rules-anthropic-stream",
             "rules-openai-serial"}  # fmt: skip
    external = ["--database-url", "postgres://bench@127.0.0.1/bench", "--redis-url", "redis://r/6"]

    assert rules <= {s.name for s in run.parse_args(external).scenarios}
    assert not rules & {s.name for s in run.parse_args([]).scenarios}
    assert not rules & {s.name for s in run.parse_args(external[:2]).scenarios}
    with pytest.raises(SystemExit) as refused:
        run.parse_args(["--only", "bare-openai,rules-openai"])
    assert refused.value.code == 2
    assert "rules-* scenarios need --database-url and --redis-url" in capsys.readouterr().err
