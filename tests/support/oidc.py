"""A real OpenID provider for the tests (tests/support/oidc_provider/, django-oauth-toolkit),
started as its own process on a free port, with its own SQLite file and RSA key.

`provider.set_user(name, ...)` rewrites a person's claims (read at each token), so a test
changes an email between two sign-ins or asks for a bad token (`aud`, `exp_offset_s`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.processes import ROOT, free_port
from tests.support.waits import wait_until

SERVE = ROOT / "tests" / "support" / "oidc_provider" / "serve.py"


@dataclass
class OpenIdProvider:
    url: str
    dir: Path
    proc: subprocess.Popen
    config: dict = field(repr=False)

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def set_user(self, name: str, **entry) -> None:
        """Replace (or add, for a user made at start) `name`'s claims and token hooks."""
        self.config["users"][name] = {**self.config["users"][name], **entry}
        (self.dir / "config.json").write_text(json.dumps(self.config))

    def log(self) -> str:
        return (self.dir / "op.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_provider(
    tmp_dir: Path, *, users: dict, clients: list[dict], port: int = 0
) -> OpenIdProvider:
    """Start the provider with `users` ({name: {"password", "claims", ...}}) and `clients`
    ([{"client_id", "client_secret", "redirect_uris"}]) on `port` (0: a free one); return
    once discovery answers."""
    port = port or free_port()
    config = {"users": users, "clients": clients}
    (tmp_dir / "config.json").write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        OP_DIR=str(tmp_dir), OP_PORT=str(port), DJANGO_SETTINGS_MODULE="oidc_provider.settings"
    )
    with open(tmp_dir / "op.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(SERVE)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    provider = OpenIdProvider(url=f"http://127.0.0.1:{port}", dir=tmp_dir, proc=proc, config=config)

    def discovery_answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the provider exited:\n{provider.log()}")
        try:
            return httpx.get(f"{provider.issuer}/.well-known/openid-configuration").is_success
        except httpx.HTTPError:
            return False

    wait_until(discovery_answers, timeout_s=30, what="the OpenID provider's discovery")
    return provider
