"""compose.yaml hands each service the settings it names, and names every setting somewhere.

The compose test (tests/deploy/test_compose.py) checks the containers' environments on
podman; this checks the file itself against config/settings_environment.py's SCHEME, so a
setting added there and forgotten here fails fast. And load_profiles refuses a bad profiles
file in one line, as an operator reads it from `compose run --rm migrate`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from config.settings_environment import SCHEME
from tests.support.processes import ROOT

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
TOLLGATE = ("migrate", "gateway", "control", "worker", "beat")
# Read by compose.yaml itself (commands, ports, the image) or set there, never passed on.
COMPOSE_OWN = {"GATEWAY_WORKERS", "GATEWAY_BIND", "GATEWAY_PORT", "TOLLGATE_IMAGE"}
# OpenTelemetry's standard variables (docs/observability.md): read by its SDK, not SCHEME.
OTEL = {
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SERVICE_NAME",
    "OTEL_SDK_DISABLED",
}


def given(service: str) -> set[str]:
    return set(SERVICES[service].get("environment") or {})


def test_every_setting_reaches_a_tollgate_service_and_only_those():
    passed = set().union(*(given(service) for service in TOLLGATE))
    assert sorted(set(SCHEME) - passed - COMPOSE_OWN) == []
    assert sorted((passed - set(SCHEME)) - {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} - OTEL) == []
    assert given("postgres") == {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}
    assert "environment" not in SERVICES["redis"] and "env_file" not in str(COMPOSE)


def test_secrets_go_only_where_they_are_used():
    def holders(name: str) -> list[str]:
        return [service for service in SERVICES if name in given(service)]

    assert holders("POSTGRES_PASSWORD") == ["postgres"]
    assert holders("DATABASE_OWNER_URL") == ["migrate"]
    assert holders("GATEWAY_INTERNAL_TOKEN") == ["gateway"]
    assert holders("TOLLGATE_METRICS_TOKEN") == ["gateway"]
    assert holders("TOLLGATE_USAGE_SINK_SECRET") == ["worker"]
    assert holders("OPENAI_API_KEY") == ["migrate", "gateway", "worker"]
    for name in OTEL:  # the processes that serve requests and crawl pages
        assert holders(name) == ["gateway", "worker"], name
    assert holders("TOLLGATE_ADMIN_OIDC_CLIENT_SECRET") == ["control"]
    # What config/settings.py requires of every process with a database.
    for name in ("DATABASE_URL", "SECRET_KEY", "SEALING_KEYS", "TOLLGATE_RECEIPT_KEYS"):
        assert holders(name) == list(TOLLGATE), name


def test_one_service_builds_and_no_start_waits_on_a_health_condition():
    assert [name for name, service in SERVICES.items() if "build" in service] == ["migrate"]
    for name, service in SERVICES.items():
        assert isinstance(service.get("depends_on", []), list), name
    for name in TOLLGATE:
        waits = " ".join(SERVICES[name].get("entrypoint") or SERVICES[name]["command"])
        assert "manage.py wait_ready" in waits, name


def load_profiles(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "load_profiles", "--json", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_or_malformed_profiles_file_is_one_line_not_a_traceback(tmp_path):
    missing = load_profiles(tmp_path / "profiles.json")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"name": "p", "kind": "openai"}])[:-3])
    malformed = load_profiles(broken)
    for done, path in ((missing, tmp_path / "profiles.json"), (malformed, broken)):
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert done.stderr.startswith("CommandError: Malformed setting PROVIDER_PROFILES_JSON: ")
        assert done.stderr.rstrip().endswith(f"(given: {path})")
