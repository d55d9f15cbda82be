"""The reverse proxy of docs/production.md ("TLS and a reverse proxy"): its nginx block read
from the doc, and Debian's nginx running it on plain http in front of a test's processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from tests.support.processes import ROOT, wait_healthy

NGINX = os.environ.get("TEST_NGINX", "/usr/sbin/nginx")
DOC = ROOT / "docs" / "production.md"
SECTION = "## TLS and a reverse proxy"
# What the doc's block is given in place of TLS: these lines, exactly as documented.
TLS_LINES = (
    "listen 443 ssl http2;",
    "ssl_certificate     /etc/letsencrypt/live/tollgate.example.com/fullchain.pem;",
    "ssl_certificate_key /etc/letsencrypt/live/tollgate.example.com/privkey.pem;",
)
GATEWAY_UPSTREAM, CONTROL_UPSTREAM = "server 127.0.0.1:8000;", "server 127.0.0.1:8001;"


def documented_block() -> str:
    section = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"^```nginx\n(.*?)^```", section, re.M | re.S)
    return block


def control_location(block: str) -> re.Pattern:
    """The regular expression of the block's `location ~` that names the control's paths."""
    [pattern] = re.findall(r"location ~ (\S+) \{\s*proxy_pass http://tollgate_control;", block)
    return re.compile(pattern)


def served_on(block: str, *, port: int, gateway: str, control: str) -> str:
    """The documented block on plain http at `port`, its upstreams the test's processes."""
    for line in (*TLS_LINES, GATEWAY_UPSTREAM, CONTROL_UPSTREAM):
        assert block.count(line) == 1, f"docs/production.md's nginx block lacks {line!r}"
    block = block.replace(TLS_LINES[0], f"listen 127.0.0.1:{port};")
    for line in TLS_LINES[1:]:
        block = block.replace(line, "")
    block = block.replace(GATEWAY_UPSTREAM, f"server {gateway.removeprefix('http://')};")
    return block.replace(CONTROL_UPSTREAM, f"server {control.removeprefix('http://')};")


class Nginx:
    def __init__(self, tmp: Path, server_block: str, port: int) -> None:
        self.url, self.tmp = f"http://127.0.0.1:{port}", tmp
        # As root, nginx's workers would run as nobody, who cannot enter pytest's tmp dir.
        user = "user root;" if os.geteuid() == 0 else ""
        (tmp / "nginx.conf").write_text(
            f"{user}\ndaemon off;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log info;\n"
            "events { worker_connections 256; }\n"
            f"http {{\naccess_log {tmp}/access.log;\nclient_body_temp_path {tmp}/body;\n"
            f"proxy_temp_path {tmp}/proxy;\n{server_block}\n}}\n"
        )
        with open(tmp / "stdout.log", "wb") as out:
            self.proc = subprocess.Popen(
                [NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_healthy(self.proc, self.url, "nginx in front of the gateway", self.log, timeout_s=15)

    def log(self) -> str:
        logs = [self.tmp / "stdout.log", self.tmp / "error.log"]
        return "".join(p.read_text(errors="replace") for p in logs if p.exists())[-3000:]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGQUIT)  # graceful: workers finish, then exit
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
