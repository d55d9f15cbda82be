"""Scale: the ledger, the tenant API, the dashboard and the admin at a busy tenant's size.

``python bench/run.py --scale [--scale-rows N] [--database-url URL] [--redis-url URL]
[--project DIR] [--json FILE] [--keep]`` (bench/SCALE.md has the method and the figures).

1. Creates a fresh PostgreSQL database (``tollgate_scale_<random>`` on the server of
   ``--database-url``), migrates it with the code of ``--project`` (default: this checkout;
   point it at another worktree to time older code with the same bench), runs ``seed_demo``
   (stub-backed provider profiles) and, in one ``manage.py shell``, ``create_tenant`` for
   50 tenants, two more groups and three more keys per tenant, a dashboard password for the
   big and the small tenant's owners and a Django superuser.
2. Bulk-loads ``--scale-rows`` usage rows over 90 days with COPY (one stream per table, the
   rows generated as they are sent): usage_usagelog (~1.03 attempts per row, packed in its
   attempt_trail by usage.trail itself; in usage_usageattempt when the project has that
   table instead), and what settlement leaves: billing_reservation (committed, ~0.78 per
   row) with its billing_ledgerentry (kind commit), billing_settledrequest (one per row),
   billing_spendhold (settled, ~0.8 per row), and, when the project has billing_receipt, a
   receipt per row chained per account as the writer's settlement writes it
   (billing.receipts' own bodies, signed per writer batch). The tenant ``scale-00`` holds
   60% of the rows, ``scale-01`` (the small tenant) 0.4%, the 48 others the rest evenly.
   Columns are read from the database (information_schema), so the loader follows the schema
   of the code under test: a column it does not know is left to its default, and one without
   a default stops the load. When the project has ``usage.partitions``,
   ``ensure_partitions`` runs for the 90 days first; after the load the id sequences are
   moved past the rows, ``rebuild_usage_rollups`` runs when the project has it, then VACUUM
   ANALYZE.
3. Starts the app (``config.asgi:application`` under uvicorn, one worker, as run.py does)
   and times, for the big and the small tenant, each call cold (its first call since the
   server started) and warm (the median of the next 3): the tenant API, the dashboard
   (logged in through its form), the Django admin's changelists (logged in through its
   form), the big tenant's CSV export of last month (time to first byte, total, bytes, the
   server's peak RSS), each tenant's receipts (the API page, the statement, the dashboard page
   and its JSON lines export) for three months and its wallet ledger; then the hot path:
   ``--scale-requests`` chat requests at concurrency ``--scale-concurrency`` through the
   gateway with the big tenant's key (run.py's request machinery), reporting the gateway's
   CPU per request and PostgreSQL's (all ``postgres`` processes of the host, from /proc),
   against the loaded database and against an empty one (the same setup without the load).
4. Prints the figures, writes ``--json``, drops its databases unless ``--keep``.

Exit code 0 when every timed call answered 200 and every hot-path request succeeded, 1
otherwise, 2 when setup failed, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import fairness
import httpx
import psycopg
import run as bench  # run.py imports this module: its helpers are only used at run time

TENANTS = 50
BIG_SHARE = 0.60
SMALL_SHARE = 0.004  # ~40k rows of 10M
DAYS = 90
WALLET_MICRO = 10**13  # 10M USD: the hot path and the ledger never run a wallet dry
OWNER_PASSWORD = "scale-owner-" + secrets.token_urlsafe(12)
ADMIN_USER = "scale-admin"
ADMIN_PASSWORD = "scale-admin-" + secrets.token_urlsafe(12)
WARM_REPEATS = 3
DEEP_PAGES = 20
HTTP_TIMEOUT_S = 600.0
LOAD_TIMEOUT_S = 4 * 3600.0
COPY_CHUNK_BYTES = 1 << 20
CSRF_NAME = "csrfmiddlewaretoken"
CSRF_RE = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
TABLES = (  # in the order their COPYs commit: foreign keys point backwards
    "usage_usagelog",
    "billing_reservation",
    "billing_ledgerentry",
    "billing_settledrequest",
    "billing_spendhold",
)
# Loaded when the project has it (code before issue 38 kept a table of attempts; since, each
# is in its usage row's attempt_trail): committed after the log its rows point at.
ATTEMPTS = "usage_usageattempt"
# Loaded when the project has it (receipts since issue 37): committed last, nothing points
# at it.
RECEIPTS = "billing_receipt"
# Every table a request's history takes room in (the daily rollups since stop 34).
SIZE_TABLES = (
    TABLES[0],
    ATTEMPTS,
    *TABLES[1:],
    RECEIPTS,
    "usage_usagerollup",
    "usage_usagedailyrollup",
)
# A writer batch: an account's receipts in it share one settled_at and its last is signed
# (billing/receipts.py); the loader signs every RECEIPT_BATCH-th receipt of an account.
RECEIPT_BATCH = 100
# ... or what an account's rows of an hour add up to, whichever is fewer: a quiet tenant's
# receipt is settled within the hour of its request, not days later.
RECEIPT_BATCH_S = 3600.0
SETTLE_AFTER_S = 0.003  # a batch settles a few ms after its last row was stored
# Timed for the oldest month of the window, one in the middle and the current one.
MONTH_NAMES = ("oldest", "middle", "current")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scale (--scale, bench/scale.py)")
    g.add_argument(
        "--scale",
        action="store_true",
        help="run the scale benchmark (a bulk-loaded ledger) instead",
    )
    g.add_argument(
        "--scale-rows", type=int, default=20_000, help="usage rows to load (20000; 10M documented)"
    )
    g.add_argument(
        "--scale-requests", type=int, default=2000, help="hot-path chat requests per database"
    )
    g.add_argument("--scale-concurrency", type=int, default=16, help="hot-path concurrency (16)")
    g.add_argument("--scale-seed", type=int, default=30, help="the generator's random seed")
    g.add_argument(
        "--scale-verify-receipts",
        action="store_true",
        help="run verify_receipts on the big tenant's loaded chain (a failure is exit 1)",
    )
    g.add_argument(
        "--project",
        type=Path,
        default=bench.ROOT,
        help="the checkout whose code migrates and serves (default: this one)",
    )


def check_arguments(args: argparse.Namespace) -> str | None:
    if args.scale_rows < 1000:
        return "--scale-rows must be at least 1000"
    if args.scale_requests < 1 or args.scale_concurrency < 1:
        return "--scale-requests and --scale-concurrency must be positive"
    args.project = args.project.resolve()
    if not (args.project / "manage.py").is_file():
        return f"--project {args.project}: no manage.py there"
    args.database_url = args.database_url or os.environ.get(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
    )
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        return "--scale needs a PostgreSQL --database-url (its server; the bench makes its own)"
    return None


# --------------------------------------------------------------------------- databases


def database_url(server_url: str, name: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path="/" + name))


def create_database(server_url: str) -> str:
    name = "tollgate_scale_" + secrets.token_hex(4)
    with psycopg.connect(database_url(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(server_url: str, name: str) -> None:
    assert name.startswith("tollgate_scale_"), name  # only ever the bench's own
    with psycopg.connect(database_url(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def in_project(project: Path) -> Iterator[None]:
    """Run run.py's process helpers (manage.py, the stub, uvicorn) in the project's checkout."""
    saved, bench.ROOT = bench.ROOT, project
    try:
        yield
    finally:
        bench.ROOT = saved


# --------------------------------------------------------------------------- tenants

SETUP_SCRIPT = """
import io, json
from django.contrib.auth import get_user_model
from django.core.management import call_command
from accounts.models import Group
from accounts.services import api_key_create, group_create
from billing.models import Wallet
User = get_user_model()
tenants = []
for i in range({tenants}):
    buf = io.StringIO()
    call_command('create_tenant', name=f'scale-{{i:02d}}', wallet_micro={wallet},
                 json=True, stdout=buf, stderr=io.StringIO())
    t = json.loads([x for x in buf.getvalue().splitlines() if x.startswith('{{')][-1])
    default = Group.objects.get(pk=t['group_id'])
    groups = [{{'id': default.pk, 'keys': [t['api_key_id']]}}]
    groups[0]['keys'].append(api_key_create(group=default, name='batch')[0].pk)
    for name in ('research', 'support'):
        g = group_create(account=default.account, name=name)
        groups.append({{'id': g.pk, 'keys': [api_key_create(group=g, name=f'{{name}}-{{k}}')[0].pk
                                            for k in (1, 2)]}})
    t['groups'] = groups
    t['wallet_id'] = Wallet.objects.get(account_id=t['account_id']).pk
    tenants.append(t)
for t in tenants[:2]:
    u = User.objects.get(username=t['username'])
    u.set_password({password!r})
    u.save()
n = Group.objects.filter(pk=tenants[0]['group_id']).update(
    budget_max_micro=None, rpm_limit=None, tpm_limit=None, concurrency_limit=None)
assert n == 1
User.objects.create_superuser({admin!r}, 'scale-admin@example.com', {admin_password!r})
print('JSON ' + json.dumps(tenants))
"""


def setup_database(env: dict[str, str], stub_url: str) -> list[dict[str, Any]]:
    """Migrate, seed the stub's profiles, create the tenants; return them (create_tenant's
    JSON plus their groups, keys and wallet)."""
    bench.run_manage(["migrate", "--noinput"], env)
    bench.run_manage(["seed_demo", "--stub-url", stub_url], env)
    script = SETUP_SCRIPT.format(
        tenants=TENANTS,
        wallet=WALLET_MICRO,
        password=OWNER_PASSWORD,
        admin=ADMIN_USER,
        admin_password=ADMIN_PASSWORD,
    )
    return shell_json(script, env)


def shell_json(script: str, env: dict[str, str]) -> Any:
    """Run `script` in the project's `manage.py shell`; return the JSON it printed last on a
    line starting "JSON " (RuntimeError with the output's tail: it printed none)."""
    out = bench.run_manage(["shell", "-c", script], env)
    lines = [x for x in out.splitlines() if x.startswith("JSON ")]
    if not lines:
        raise RuntimeError(f"manage.py shell printed no JSON:\n{out[-2000:]}")
    return json.loads(lines[-1].removeprefix("JSON "))


# --------------------------------------------------------------------------- the load


@dataclass
class LoadResult:
    rows: int
    written: dict[str, int]  # what the generator wrote, per table
    # count(*) after the load less before it (create_tenant wrote an opening ledger entry)
    counted: dict[str, int] = field(default_factory=dict)
    rollup_requests: int | None = None  # sum(requests) of the rollups, when rebuilt
    partitions: list[str] = field(default_factory=list)
    copy_s: float = 0.0
    rollups_s: float | None = None
    vacuum_s: float = 0.0
    usage_rows_per_s: float = 0.0
    all_rows_per_s: float = 0.0
    sizes_bytes: dict[str, int] = field(default_factory=dict)
    # As loaded, before the deployment's default retention ran (apply_retention).
    sizes_before_retention: dict[str, int] = field(default_factory=dict)
    # usage.apply_retention's report, billing.apply_retention's under "billing"
    retention: dict[str, Any] = field(default_factory=dict)
    total_bytes: int = 0
    bytes_per_usage_row: float = 0.0
    start: str = ""
    end: str = ""
    middle_request_ids: dict[int, str] = field(default_factory=dict)  # account id -> one
    receipts_loaded: bool = False  # the project has billing_receipt: a receipt per row
    bytes_per_receipt: float | None = None  # billing_receipt's size (+ indexes) / its rows
    bytes_per_usage_row_without_receipts: float = 0.0
    receipts_verified: bool | None = None  # --scale-verify-receipts: the big tenant's chain
    receipts_verify_s: float | None = None
    receipts_verify_output: str = ""
    attempts: int = 0  # attempts generated, in the rows' trails or their own table
    trails_loaded: bool = False  # the project's log has attempt_trail: attempts are packed in it
    bytes_per_trail: float | None = None  # avg pg_column_size(attempt_trail), its header included


def ts(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def table_columns(conn: psycopg.Connection, table: str) -> list[tuple[str, bool, bool]]:
    """(name, nullable, has a default) of each column of the table, in order."""
    rows = conn.execute(
        "SELECT column_name, is_nullable = 'YES',"
        " column_default IS NOT NULL OR is_identity = 'YES' OR is_generated <> 'NEVER'"
        " FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s"
        " ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    if not rows:
        raise RuntimeError(f"no table {table} in the migrated database")
    return [(r[0], r[1], r[2]) for r in rows]


# Each table's values in this order, as COPY text; the loader keeps those the table has.
KNOWN = {
    "usage_usagelog": (
        "id", "request_id", "client_request_id", "created_at", "stored_at", "account_id",
        "group_id", "api_key_id", "caller_label", "route", "model_requested", "model_served",
        "provider", "served_by", "tokens_in", "tokens_out", "byok_tokens_in", "byok_tokens_out",
        "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "web_pages",
        "web_rendered_pages", "web_queries", "provider_cost_micro", "bytes_in", "bytes_out",
        "bandwidth_charge_micro", "upstream_sent", "status", "error_code", "latency_ms",
        "ttft_ms", "streamed", "reservation_id", "attempt_trail",
    ),
    "usage_usageattempt": (
        "id", "log_id", "order", "provider", "model", "served_by", "source", "outcome",
        "upstream_status", "latency_ms", "reservation_id", "created_at", "key_label",
    ),
    "billing_reservation": (
        "id", "wallet_id", "request_id", "group_id", "api_key_id", "attempt_no", "call_sent",
        "unmeasured", "amount_micro", "committed_micro", "excess_micro", "status",
        "created_at", "expires_at", "resolved_at",
    ),
    "billing_ledgerentry": (
        "id", "wallet_id", "kind", "amount_micro", "balance_after_micro", "reservation_id",
        "reason", "created_at", "request_id",
    ),
    "billing_settledrequest": (
        "id", "request_id", "group_id", "api_key_id", "bandwidth_micro", "provider_cost_micro",
        "source", "created_at",
    ),
    "billing_spendhold": (
        "id", "request_id", "group_id", "api_key_id", "caller_spend_id", "amount_micro",
        "status", "call_sent", "created_at", "expires_at",
    ),
    RECEIPTS: (
        "id", "account_id", "seq", "request_id", "kind", "group_id", "api_key_id",
        "cost_micro", "bandwidth_micro", "settled_at", "body", "hash", "signature", "key_id",
    ),
}  # fmt: skip


def column_plan(conn: psycopg.Connection, table: str) -> tuple[list[str], list[int]]:
    """The columns COPY fills and, for each, its index in KNOWN[table]."""
    known = KNOWN[table]
    names, picks = [], []
    for name, nullable, has_default in table_columns(conn, table):
        if name in known:
            names.append(name)
            picks.append(known.index(name))
        elif not nullable and not has_default:
            raise RuntimeError(
                f"{table}.{name} is NOT NULL without a default and the loader does not know"
                " it: teach bench/scale.py's KNOWN and generator this column"
            )
    return names, picks


# (endpoint, model requested, model served, provider, input tokens mean, output mean,
#  platform cost per input / output Mtok in micro-USD, weight)
MIX = (
    ("chat", "gpt-4o-mini", "gpt-4o-mini", "openai-main", 900, 250, 150_000, 600_000, 38),
    ("chat", "gpt-4o", "gpt-4o-2024-08-06", "openai-main", 1500, 400, 2_500_000, 10_000_000, 14),
    ("chat", "o3-mini", "o3-mini", "openai-main", 2000, 1200, 1_100_000, 4_400_000, 6),
    ("chat", "llama-3.1-70b", "meta-llama/llama-3.1-70b", "openrouter", 1200, 300, 400_000,
     400_000, 7),
    ("messages", "claude-3-5-haiku", "claude-3-5-haiku-latest", "anthropic-main", 1100, 300,
     800_000, 4_000_000, 14),
    ("messages", "claude-sonnet-4", "claude-sonnet-4-20250514", "anthropic-main", 2500, 600,
     3_000_000, 15_000_000, 9),
    ("internal.complete", "gpt-4o-mini", "gpt-4o-mini", "openai-main", 600, 120, 150_000,
     600_000, 5),
    ("web.scrape", "", "", "direct", 0, 0, 0, 0, 5),
    ("web.search", "", "", "stub-search", 0, 0, 0, 0, 2),
)  # fmt: skip
ERRORS = (  # (status, error code, attempt outcome)
    (502, "LM-5001", "upstream_error"),
    (429, "LM-3001", "rate_limited"),
    (400, "LM-2001", "invalid_request"),
    (504, "LM-5001", "timeout"),
    (402, "LM-4001", "insufficient_quota"),
)
CALLERS = ("", "", "", "etl", "web-app", "support-bot", "nightly-eval", "mobile", "search-ui")
WEB_PRICES = {"page": 100, "query": 5_000}  # micro-USD per unit, as the web rows' costs


class CopyStreams:
    """One COPY per table, each on its own connection, fed as the rows are generated."""

    def __init__(self, url: str, tables: tuple[str, ...]) -> None:
        self.tables = tables
        self.stacks: dict[str, contextlib.ExitStack] = {}
        self.buffers: dict[str, list[str]] = {}
        self.sizes: dict[str, int] = {}
        self.copies: dict[str, Any] = {}
        self.picks: dict[str, list[int]] = {}
        self.columns: dict[str, list[str]] = {}  # what each table's COPY fills
        self.written: dict[str, int] = dict.fromkeys(tables, 0)
        try:
            for table in tables:
                stack = self.stacks[table] = contextlib.ExitStack()
                conn = stack.enter_context(psycopg.connect(url))
                names, picks = column_plan(conn, table)
                cols = ", ".join(f'"{n}"' for n in names)
                cur = stack.enter_context(conn.cursor())
                self.copies[table] = stack.enter_context(
                    cur.copy(f"COPY {table} ({cols}) FROM STDIN")
                )
                self.picks[table] = picks
                self.columns[table] = names
                self.buffers[table] = []
                self.sizes[table] = 0
        except BaseException:
            self.abort()
            raise

    def add(self, table: str, values: tuple[str, ...]) -> None:
        line = "\t".join([values[i] for i in self.picks[table]]) + "\n"
        buf = self.buffers[table]
        buf.append(line)
        self.sizes[table] += len(line)
        self.written[table] += 1
        if self.sizes[table] >= COPY_CHUNK_BYTES:
            self.copies[table].write("".join(buf))
            buf.clear()
            self.sizes[table] = 0

    def close(self) -> None:
        """Send what is left and commit every table, in TABLES order: a row's foreign keys
        (checked at commit) point into tables committed before it."""
        for table, buf in self.buffers.items():
            if buf:
                self.copies[table].write("".join(buf))
        for table in self.tables:
            self.stacks.pop(table).close()  # ends the COPY, commits, closes its connection

    def abort(self) -> None:
        """Close every connection without committing."""
        for stack in self.stacks.values():
            with contextlib.suppress(Exception):
                stack.__exit__(RuntimeError, RuntimeError("aborted"), None)
        self.stacks.clear()


def scalar(cursor: psycopg.Cursor) -> Any:
    """Return the first column of the one row a query gives (an aggregate's, a function's)."""
    row = cursor.fetchone()
    assert row is not None, "the query gave no row"
    return row[0]


def next_ids(url: str, tables: tuple[str, ...]) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {
            t: scalar(conn.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {t}")) for t in tables
        }


def django_with(env: dict[str, str]) -> None:
    """Set Django up in this process with a database's settings (its receipt key among them),
    so the loader builds receipts with this checkout's billing.receipts itself; os.environ
    is left as it was (the children get their own)."""
    import django

    code = str(Path(__file__).resolve().parents[1])
    if code not in sys.path:
        sys.path.insert(0, code)
    saved = dict(os.environ)
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    try:
        django.setup()
    finally:
        os.environ.clear()
        os.environ.update(saved)


class ReceiptChains:
    """Every account's receipt chain as the usage writer's settlement writes it: per account
    in the order of its rows, a `charge` receipt per settled request, its body, hash, packed
    bytes and signature made by billing.receipts and billing.receipt_codec themselves. Rows
    wait in a writer batch of RECEIPT_BATCH per account (memory stays flat: at most that
    many per account); a batch's receipts share one settled_at, a few ms after the last of
    them was stored, and its last is signed, as `append` does with one batch. A batch closes
    at RECEIPT_BATCH receipts or when a row comes RECEIPT_BATCH_S after its first."""

    def __init__(self, streams: CopyStreams, first_id: int) -> None:
        from billing import receipts
        from billing.receipt_codec import pack
        from billing.receipt_keys import receipt_keys
        from core.sinks import rfc3339
        from core.usage_record import UsageRecord

        self.receipts, self.pack, self.rfc3339 = receipts, pack, rfc3339
        self.UsageRecord = UsageRecord
        keys = receipt_keys()
        self.key_id, self.signer = keys.newest, keys.private[keys.newest]
        self.streams = streams
        self.next_id = first_id
        self.pending: dict[int, list[tuple[Any, float]]] = {}
        self.opened: dict[int, float] = {}  # when each waiting batch's first row came
        # Per account: (last seq, last hash, running totals, last settled_at epoch).
        self.heads: dict[int, tuple[int, str, dict[str, int], float]] = {}

    def add(
        self, record: Any, *, entries: list[int], taken_micro: int, created: float, stored: float
    ) -> None:
        """Queue the receipt of a row created and stored then (epoch seconds) whose settlement
        took `taken_micro` from the wallet through the ledger `entries`."""
        receipts = self.receipts
        account_id = record.account_id
        if created - self.opened.get(account_id, created) > RECEIPT_BATCH_S:
            self.flush(account_id)
        draft = receipts.Draft(
            account_id=record.account_id,
            request_id=record.request_id,
            kind="charge",
            group_id=record.group_id,
            api_key_id=record.api_key_id,
            cost_micro=record.provider_cost_micro,
            bandwidth_micro=record.bandwidth_charge_micro,
            detail=receipts.request_detail(record),
            wallet_entries=tuple(entries),
            wallet_taken_micro=taken_micro,
        )
        batch = self.pending.setdefault(account_id, [])
        self.opened.setdefault(account_id, created)
        batch.append((draft, stored))
        if len(batch) >= RECEIPT_BATCH:
            self.flush(account_id)

    def flush(self, account_id: int) -> None:
        """Write an account's waiting batch: chained on from its head, the last one signed."""
        batch = self.pending.pop(account_id, [])
        self.opened.pop(account_id, None)
        if not batch:
            return
        receipts = self.receipts
        seq, prev, running, last_settled = self.heads.get(
            account_id, (0, receipts.GENESIS, dict(receipts.NO_TOTALS), 0.0)
        )
        settled = max(last_settled, max(stored for _, stored in batch)) + SETTLE_AFTER_S
        settled_dt = datetime.fromtimestamp(settled, UTC)
        settled_text, settled_column = self.rfc3339(settled_dt), settled_dt.isoformat()
        for n, (draft, _) in enumerate(batch, start=1):
            seq += 1
            body = receipts.receipt_body(
                draft, seq=seq, prev=prev, settled_at=settled_text, running=running
            )
            running = body["running"]
            text = receipts.canonical(body)
            prev = receipts.digest(text)
            last = n == len(batch)
            signature = self.signer.sign(bytes.fromhex(prev)).hex() if last else ""
            # bytea in COPY's text format: \\x, then hex (COPY reads \\\\ as one backslash).
            self.streams.add(
                RECEIPTS,
                (
                    str(self.next_id), str(account_id), str(seq), draft.request_id, draft.kind,
                    str(draft.group_id), str(draft.api_key_id), str(draft.cost_micro),
                    str(draft.bandwidth_micro), settled_column,
                    "\\\\x" + self.pack(text.decode()).hex(), "\\\\x" + prev, signature,
                    self.key_id if last else "",
                ),
            )  # fmt: skip
            self.next_id += 1
        self.heads[account_id] = (seq, prev, running, settled)

    def close(self) -> None:
        """Write every account's last batch (its chain then ends on a signed receipt)."""
        for account_id in list(self.pending):
            self.flush(account_id)


class TrailPacker:
    """Each usage row's attempts packed into its attempt_trail as the usage writer packs them
    (usage.trail itself), as COPY text; counts the attempts packed."""

    def __init__(self) -> None:
        from usage.trail import pack_trail

        self.pack = pack_trail
        self.attempts = 0

    def column(self, attempts: list[Any]) -> str:
        self.attempts += len(attempts)
        # bytea in COPY's text format: \\x, then hex (COPY reads \\\\ as one backslash).
        return "\\\\x" + self.pack(attempts).hex()


def generate(
    streams: CopyStreams,
    tenants: list[dict[str, Any]],
    *,
    rows: int,
    start: datetime,
    end: datetime,
    first_ids: dict[str, int],
    seed: int,
    chains: ReceiptChains | None = None,
    trails: TrailPacker | None = None,
) -> dict[int, str]:
    """Write `rows` usage rows and their books (and, given `chains`, their receipts); return
    one request id per account from the middle of the window (the first of its rows past the
    middle). Attempts go in the rows' trails given `trails`, in their table when it is loaded."""
    rng = random.Random(seed)
    t0, span = start.timestamp(), (end - start).total_seconds()
    others = (1.0 - BIG_SHARE - SMALL_SHARE) / (len(tenants) - 2)
    weights = [BIG_SHARE, SMALL_SHARE] + [others] * (len(tenants) - 2)
    # Per tenant: its keys (with their group), the busiest first.
    tenant_keys = [[(g["id"], k) for g in t["groups"] for k in g["keys"]] for t in tenants]
    key_weights = [[1.0 / (j + 1) for j in range(len(keys))] for keys in tenant_keys]
    balance = {t["wallet_id"]: WALLET_MICRO for t in tenants}
    mix_weights = [m[-1] for m in MIX]
    log_id, att_id = first_ids["usage_usagelog"], first_ids.get(ATTEMPTS, 1)
    attempts_table = ATTEMPTS in streams.tables
    if chains is not None or trails is not None:
        from core.usage_record import AttemptRecord
    res_id, led_id = first_ids["billing_reservation"], first_ids["billing_ledgerentry"]
    set_id, hold_id = first_ids["billing_settledrequest"], first_ids["billing_spendhold"]
    middle: dict[int, str] = {}
    half = rows // 2
    add = streams.add
    # Draw in batches: random.choices over a batch is far faster than one call per row.
    batch = 10_000
    tick = max(rows // 10, batch)
    for base in range(0, rows, batch):
        if base and base % tick < batch:
            print(f"  {base} rows sent", flush=True)
        count = min(batch, rows - base)
        who = rng.choices(range(len(tenants)), weights=weights, k=count)
        kinds = rng.choices(MIX, weights=mix_weights, k=count)
        for j in range(count):
            i = base + j
            tenant = tenants[who[j]]
            account_id = tenant["account_id"]
            ti = who[j]
            group_id, key_id = rng.choices(tenant_keys[ti], weights=key_weights[ti])[0]
            endpoint, model_req, model_srv, provider, tin, tout, pin, pout, _ = kinds[j]
            created = t0 + span * (i + rng.random()) / rows
            # As the gateway mints them (core/ids.py): the millisecond, then 80 random bits.
            rid = f"{int(created * 1000):012x}{rng.getrandbits(80):020x}"
            if i >= half and account_id not in middle:
                middle[account_id] = rid
            web = endpoint.startswith("web.")
            team = not web and rng.random() < 0.3
            error = ERRORS[rng.randrange(len(ERRORS))] if rng.random() < 0.02 else None
            streamed = not web and rng.random() < 0.4
            latency = int(rng.lognormvariate(6.5, 0.7)) if not web else rng.randint(150, 4000)
            n_in = 0 if web or error else int(rng.expovariate(1.0 / tin)) + 8
            n_out = 0 if web or error else int(rng.expovariate(1.0 / tout)) + 1
            cache_read = n_in // 2 if n_in and rng.random() < 0.25 else 0
            reasoning = n_out // 3 if model_req == "o3-mini" else 0
            pages = rng.randint(1, 6) if endpoint == "web.scrape" and not error else 0
            queries = 1 if endpoint == "web.search" and not error else 0
            if web:
                cost = pages * WEB_PRICES["page"] + queries * WEB_PRICES["query"]
            elif team:
                cost = 0
            else:
                cost = (n_in * pin + n_out * pout) // 1_000_000
            bytes_in = rng.randint(300, 9000)
            bytes_out = rng.randint(200, 6000) + pages * rng.randint(20_000, 90_000)
            bandwidth = (bytes_in + bytes_out) // 4000
            served_by = "team" if team else ("platform" if not error else "")
            status, code, outcome = error if error else (200, "", "ok")
            platform = not team and not web and not error
            retried = not web and rng.random() < 0.03
            c = ts(created)
            stored_after = latency / 1000.0 + rng.random()
            stored = ts(created + stored_after)
            # The served attempt's reservation (platform attempts hold one each).
            attempts = [("429", "rate_limited", team)] if retried else []
            attempts.append(("" if error else "200", outcome, team))
            reservation_of_log = "\\N"
            entries: list[int] = []  # the ledger entries that moved its wallet's money
            taken = 0
            trail = []  # the attempts as records, for the row's trail and its receipt
            for order, (up_status, out, by_team) in enumerate(attempts, start=1):
                reservation = "\\N"
                if not by_team and not web and (platform or out != "ok"):
                    amount = max(cost * 2, 1000)
                    committed = cost if out == "ok" else 0
                    reservation = str(res_id)
                    add(
                        "billing_reservation",
                        (
                            reservation, str(tenant["wallet_id"]), rid, str(group_id),
                            str(key_id), str(order), "t", "f", str(amount), str(committed), "0",
                            "committed", c, ts(created + 300), stored,
                        ),
                    )  # fmt: skip
                    balance[tenant["wallet_id"]] -= committed
                    add(
                        "billing_ledgerentry",
                        (
                            str(led_id), str(tenant["wallet_id"]), "commit", str(-committed),
                            str(balance[tenant["wallet_id"]]), reservation, "", stored, rid,
                        ),
                    )  # fmt: skip
                    entries.append(led_id)
                    taken += committed
                    res_id += 1
                    led_id += 1
                    if out == "ok":
                        reservation_of_log = reservation
                by = "team" if by_team else "platform"
                if attempts_table:
                    add(
                        ATTEMPTS,
                        (
                            str(att_id), str(log_id), str(order), provider, model_srv, by,
                            f"{provider}:{model_srv}:{by}", out, up_status or "\\N",
                            str(latency // len(attempts)), reservation, c, "",
                        ),
                    )  # fmt: skip
                    att_id += 1
                if chains is not None or trails is not None:
                    trail.append(
                        AttemptRecord(
                            order=order, provider=provider, model=model_srv, served_by=by,
                            source=f"{provider}:{model_srv}:{by}", outcome=out,
                            upstream_status=int(up_status) if up_status else None,
                            latency_ms=latency // len(attempts),
                            reservation_id=None if reservation == "\\N" else int(reservation),
                        )
                    )  # fmt: skip
            # Drawn in this order whether or not receipts are loaded: the same seed, the same rows.
            client_rid = f"client-{i:x}" if rng.random() < 0.3 else ""
            caller = rng.choice(CALLERS)
            upstream_sent = not (error and rng.random() < 0.5)
            add(
                "usage_usagelog",
                (
                    str(log_id), rid, client_rid, c, stored,
                    str(account_id), str(group_id), str(key_id), caller, endpoint,
                    model_req, model_srv if not error else "", provider, served_by,
                    str(0 if team else n_in), str(0 if team else n_out),
                    str(n_in if team else 0), str(n_out if team else 0), str(cache_read), "0",
                    str(reasoning), str(pages), "0", str(queries), str(cost), str(bytes_in),
                    str(bytes_out), str(bandwidth), "t" if upstream_sent else "f",
                    str(status), code, str(latency),
                    str(latency // 4) if streamed and not error else "\\N",
                    "t" if streamed else "f", reservation_of_log,
                    trails.column(trail) if trails is not None else "\\\\x",
                ),
            )  # fmt: skip
            if chains is not None:
                if web:
                    prices = {"page": WEB_PRICES["page"]} if pages else {}
                    prices |= {"query": WEB_PRICES["query"]} if queries else {}
                elif platform:
                    prices = {
                        "input_micro_per_mtok": pin, "output_micro_per_mtok": pout,
                        "cached_input_micro_per_mtok": pin // 2, "cache_write_micro_per_mtok": pin,
                    }  # fmt: skip
                else:
                    prices = {}
                record = chains.UsageRecord(
                    request_id=rid, client_request_id=client_rid,
                    created_at=datetime.fromtimestamp(created, UTC), account_id=account_id,
                    group_id=group_id, api_key_id=key_id, caller_label=caller,
                    endpoint=endpoint, model_requested=model_req,
                    model_served=model_srv if not error else "", provider=provider,
                    served_by=served_by, tokens_in=0 if team else n_in,
                    tokens_out=0 if team else n_out, byok_tokens_in=n_in if team else 0,
                    byok_tokens_out=n_out if team else 0, provider_cost_micro=cost,
                    bytes_in=bytes_in, bytes_out=bytes_out, bandwidth_charge_micro=bandwidth,
                    upstream_sent=upstream_sent, status=status, error_code=code,
                    latency_ms=latency, ttft_ms=latency // 4 if streamed and not error else None,
                    streamed=streamed,
                    reservation_id=None if reservation_of_log == "\\N" else int(reservation_of_log),
                    cache_read_tokens=cache_read, reasoning_tokens=reasoning, web_pages=pages,
                    web_queries=queries,
                    attempts=tuple(trail),
                    prices=prices,
                )  # fmt: skip
                chains.add(
                    record,
                    entries=entries,
                    taken_micro=taken,
                    created=created,
                    stored=created + stored_after,
                )
            log_id += 1
            add(
                "billing_settledrequest",
                (
                    str(set_id), rid, str(group_id), str(key_id), str(bandwidth), str(cost),
                    "settle", stored,
                ),
            )  # fmt: skip
            set_id += 1
            if rng.random() < 0.8:
                add(
                    "billing_spendhold",
                    (
                        str(hold_id), rid, str(group_id), str(key_id), "\\N",
                        str(max(cost * 2, 1000)), "settled", "f" if team else "t", c,
                        ts(created + 300),
                    ),
                )  # fmt: skip
                hold_id += 1
    return middle


def ensure_partitions(
    args: argparse.Namespace, env: dict[str, str], start: datetime, end: datetime
) -> list[str]:
    """The project's monthly partitions over the window, when it has them: the usage log's
    (usage.partitions) and the billing tables' (billing.partitions, made from the window's
    first month on: the database is empty, as if it had run partitioned all along)."""
    project = args.project
    calls = []
    if (project / "usage" / "partitions.py").exists():
        calls.append("usage.partitions.ensure_partitions(start=start, end=end)")
    if (project / "billing" / "partitions.py").is_file():
        calls.append("billing.partitions.ensure_partitions(start=start, end=end, now=start)")
    if not calls:
        return []
    script = (
        "import json; from datetime import datetime; "
        "import usage.partitions; "
        + ("import billing.partitions; " if len(calls) > 1 else "")
        + f"start = datetime.fromisoformat({start.isoformat()!r}); "
        f"end = datetime.fromisoformat({end.isoformat()!r}); "
        f"made = [name for names in ({', '.join(calls)},) for name in names or []]; "
        "print('JSON ' + json.dumps(made))"
    )
    return shell_json(script, env)


def apply_retention(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """What beat's hourly `usage.apply_retention` and `billing.apply_retention` do with the
    deployment's defaults, run once on the loaded database: usage rows are kept (0 days by
    default), the per-request billing tables' closed working state past its retention goes
    (billing.partitions), its report under "billing" (a project from before billing had its
    own task ran both in usage's, which reported it there). The sizes are measured after it,
    as a deployment holds them; `sizes_before_retention` has them as loaded."""
    if not (args.project / "billing" / "partitions.py").is_file():
        return {}
    script = (
        "import json; import billing.tasks, usage.tasks; "
        "report = usage.tasks.apply_retention(); "
        "report = {**report, 'billing': billing.tasks.apply_retention()}"
        " if hasattr(billing.tasks, 'apply_retention') else report; "
        "print('JSON ' + json.dumps(report))"
    )
    return shell_json(script, env)


def sizes(conn: psycopg.Connection) -> dict[str, int]:
    out = {}
    for table in SIZE_TABLES:
        if scalar(conn.execute("SELECT to_regclass(%s)", (table,))) is None:
            continue
        # A partitioned table's own size is 0: its partitions (and their indexes) hold it all.
        out[table] = scalar(
            conn.execute(
                "SELECT CASE WHEN c.relkind = 'p' THEN (SELECT coalesce(sum("
                "pg_total_relation_size(t.relid)), 0) FROM pg_partition_tree(c.oid) t)"
                " ELSE pg_total_relation_size(c.oid) END::bigint"
                " FROM pg_class c WHERE c.oid = %s::regclass",
                (table,),
            )
        )
    return out


def load(
    args: argparse.Namespace, env: dict[str, str], url: str, tenants: list[dict[str, Any]]
) -> LoadResult:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    end = now
    start = end - timedelta(days=DAYS)
    result = LoadResult(
        rows=args.scale_rows, written={}, start=start.isoformat(), end=end.isoformat()
    )
    result.partitions = ensure_partitions(
        args, env, start - timedelta(days=1), now + timedelta(days=32)
    )
    with psycopg.connect(url) as conn:
        has_receipts = scalar(conn.execute("SELECT to_regclass(%s)", (RECEIPTS,)))
        has_attempts = scalar(conn.execute("SELECT to_regclass(%s)", (ATTEMPTS,)))
        result.trails_loaded = any(
            name == "attempt_trail" for name, _, _ in table_columns(conn, TABLES[0])
        )
    tables = (*TABLES, ATTEMPTS) if has_attempts is not None else TABLES
    tables = (*tables, RECEIPTS) if has_receipts is not None else tables
    result.receipts_loaded = has_receipts is not None
    first = next_ids(url, tables)
    with psycopg.connect(url) as conn:
        before = {t: scalar(conn.execute(f"SELECT count(*) FROM {t}")) for t in tables}
    if result.receipts_loaded or result.trails_loaded:
        django_with(env)
    t0 = time.perf_counter()
    streams = CopyStreams(url, tables)
    try:
        chains = ReceiptChains(streams, first[RECEIPTS]) if result.receipts_loaded else None
        trails = TrailPacker() if result.trails_loaded else None
        result.middle_request_ids = generate(
            streams, tenants, rows=args.scale_rows, start=start, end=end, first_ids=first,
            seed=args.scale_seed, chains=chains, trails=trails,
        )  # fmt: skip
        if chains is not None:
            chains.close()
    except BaseException:
        streams.abort()
        raise
    streams.close()
    result.copy_s = time.perf_counter() - t0
    result.written = dict(streams.written)
    result.attempts = trails.attempts if trails is not None else result.written.get(ATTEMPTS, 0)
    result.usage_rows_per_s = args.scale_rows / result.copy_s
    result.all_rows_per_s = sum(result.written.values()) / result.copy_s
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            seq = scalar(conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", (table,)))
            if seq:
                conn.execute(f"SELECT setval(%s, (SELECT max(id) FROM {table}))", (seq,))
        for wallet_id, bal in _final_balances(conn, tenants).items():
            conn.execute(
                "UPDATE billing_wallet SET balance_micro = %s WHERE id = %s", (bal, wallet_id)
            )
    if (args.project / "usage/management/commands/rebuild_usage_rollups.py").is_file():
        t1 = time.perf_counter()
        bench.run_manage(["rebuild_usage_rollups"], {**env})
        result.rollups_s = time.perf_counter() - t1
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            counted = scalar(conn.execute(f"SELECT count(*) FROM {table}"))
            result.counted[table] = counted - before[table]
        result.sizes_before_retention = sizes(conn)
    result.retention = apply_retention(args, env)
    t2 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        # Write the load's dirty pages now, not while the pages and the hot path are timed.
        conn.execute("CHECKPOINT")
        result.vacuum_s = time.perf_counter() - t2
        if scalar(conn.execute("SELECT to_regclass('usage_usagerollup')")) is not None:
            result.rollup_requests = scalar(
                conn.execute("SELECT coalesce(sum(requests), 0)::bigint FROM usage_usagerollup")
            )
        result.sizes_bytes = sizes(conn)
        if result.trails_loaded:
            result.bytes_per_trail = scalar(
                conn.execute("SELECT avg(pg_column_size(attempt_trail))::float FROM usage_usagelog")
            )
    result.total_bytes = sum(result.sizes_bytes.values())
    result.bytes_per_usage_row = result.total_bytes / args.scale_rows
    receipts_bytes = result.sizes_bytes.get(RECEIPTS, 0)
    result.bytes_per_usage_row_without_receipts = (
        result.total_bytes - receipts_bytes
    ) / args.scale_rows
    if result.counted.get(RECEIPTS):
        result.bytes_per_receipt = receipts_bytes / result.counted[RECEIPTS]
    if result.receipts_loaded and args.scale_verify_receipts:
        verify_receipts(env, tenants[0]["account_id"], result)
    return result


def verify_receipts(env: dict[str, str], account_id: int, result: LoadResult) -> None:
    """`manage.py verify_receipts --account` on the loaded chain (hashes, order, signatures,
    running totals, the columns against the bodies, and the ledger reconciled with it)."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "manage.py", "verify_receipts", "--account", str(account_id)],
        cwd=bench.ROOT, env=env, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S,
    )  # fmt: skip
    result.receipts_verify_s = time.perf_counter() - t0
    result.receipts_verified = done.returncode == 0
    result.receipts_verify_output = (done.stdout[-1500:] + done.stderr[-1500:]).strip()
    print(
        f"  verify_receipts --account {account_id}: "
        f"{'intact' if result.receipts_verified else 'FAILED'} in {result.receipts_verify_s:.1f}"
        f" s: {result.receipts_verify_output.splitlines()[-1:]}",
        flush=True,
    )


def _final_balances(conn: psycopg.Connection, tenants: list[dict[str, Any]]) -> dict[int, int]:
    """Each wallet's balance after its newest ledger entry (the wallet agrees with its ledger)."""
    rows = conn.execute(
        "SELECT DISTINCT ON (wallet_id) wallet_id, balance_after_micro FROM billing_ledgerentry"
        " WHERE kind = 'commit' ORDER BY wallet_id, id DESC"
    ).fetchall()
    return {w: b for w, b in rows}


# --------------------------------------------------------------------------- timed calls


@dataclass
class Timed:
    name: str
    tenant: str  # "big", "small" or "admin"
    url: str
    status: int = 0
    cold_ms: float | None = None
    warm_ms: float | None = None  # median of WARM_REPEATS
    bytes: int = 0
    statuses: list[int] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.statuses) and all(s == 200 for s in self.statuses)


def timed_get(client: httpx.Client, url: str, **kw: Any) -> tuple[int, float, int]:
    t0 = time.perf_counter()
    resp = client.get(url, **kw)
    body = resp.content
    return resp.status_code, (time.perf_counter() - t0) * 1000.0, len(body)


def cold_warm(client: httpx.Client, name: str, tenant: str, url: str, **kw: Any) -> Timed:
    t = Timed(name, tenant, url)
    status, t.cold_ms, t.bytes = timed_get(client, url, **kw)
    t.statuses.append(status)
    return _warm(t, client, url, **kw)


def _warm(t: Timed, client: httpx.Client, url: str, **kw: Any) -> Timed:
    """Time `url` WARM_REPEATS more times into `t` (the median is its warm figure); print it."""
    warm = []
    for _ in range(WARM_REPEATS):
        status, elapsed, _ = timed_get(client, url, **kw)
        t.statuses.append(status)
        warm.append(elapsed)
    t.warm_ms = statistics.median(warm)
    t.status = max(t.statuses, key=lambda s: s != 200)
    note = f"  ({t.note})" if t.note else ""
    print(
        f"  {t.tenant:5s} {t.name:34s} cold {t.cold_ms:9.1f} ms  warm {t.warm_ms:9.1f} ms"
        f"  {t.bytes:>9d} B  {t.status}{note}",
        flush=True,
    )
    return t


def deep_page(client: httpx.Client, tenant: str, url: str, **kw: Any) -> Timed:
    """Follow `next` DEEP_PAGES times (cold: the walk's last page), then that page warm."""
    t = Timed(f"usage deep page (next x{DEEP_PAGES})", tenant, url)
    walk_t0 = time.perf_counter()
    last_ms = 0.0
    for _ in range(DEEP_PAGES):
        t0 = time.perf_counter()
        resp = client.get(url, **kw)
        last_ms = (time.perf_counter() - t0) * 1000.0
        t.statuses.append(resp.status_code)
        nxt = resp.json().get("next") if resp.status_code == 200 else None
        if not nxt:
            t.note = "no next link"
            break
        url = nxt
    t.url = url
    status, t.cold_ms, t.bytes = timed_get(client, url, **kw)
    t.statuses.append(status)
    walk_ms = (time.perf_counter() - walk_t0) * 1000.0
    t.note = (t.note + " " if t.note else "") + (
        f"walk {walk_ms:.0f} ms, page {DEEP_PAGES} {last_ms:.0f} ms"
    )
    return _warm(t, client, url, **kw)


def form_login(client: httpx.Client, url: str, username: str, password: str) -> None:
    page = client.get(url)
    found = csrf_token(page.text)
    if page.status_code != 200 or not found:
        raise RuntimeError(f"GET {url}: {page.status_code}, no CSRF token")
    resp = client.post(
        url,
        data={CSRF_NAME: found, "username": username, "password": password},
        headers={"Referer": url},
    )
    if resp.status_code != 302:
        raise RuntimeError(f"login at {url} as {username}: {resp.status_code}, not a redirect")


def csrf_token(html: str) -> str | None:
    match = CSRF_RE.search(html)
    return match.group(1) if match else None


def tenant_calls(base: str, tenant: dict[str, Any], label: str, middle_rid: str) -> list[Timed]:
    out = []
    group = tenant["groups"][1]
    headers = {"Authorization": f"Token {tenant['api_token']}"}
    since = (datetime.now(UTC) - timedelta(days=30)).date().isoformat()
    with httpx.Client(base_url=base, headers=headers, timeout=HTTP_TIMEOUT_S) as c:
        for name, path in (
            ("api usage", "/api/usage"),
            ("api usage ?group&key", f"/api/usage?group={group['id']}&key={group['keys'][0]}"),
            ("api usage/daily", "/api/usage/daily"),
            ("api usage/models", "/api/usage/models"),
            ("api usage/daily ?start=-30d", f"/api/usage/daily?start={since}"),
            ("api usage/requests/<id>", f"/api/usage/requests/{middle_rid}"),
        ):
            out.append(cold_warm(c, name, label, path))
        out.append(deep_page(c, label, base + "/api/usage"))
    with httpx.Client(base_url=base, timeout=HTTP_TIMEOUT_S) as c:
        form_login(c, base + "/login/", tenant["username"], OWNER_PASSWORD)
        acct = f"/dashboard/{tenant['account_id']}"
        for name, path in (
            ("dashboard overview", f"{acct}/"),
            ("dashboard charts 7d", f"{acct}/charts/?days=7"),
            ("dashboard charts 30d", f"{acct}/charts/?days=30"),
            ("dashboard charts 90d", f"{acct}/charts/?days=90"),
            (
                "dashboard usage ?group&key",
                f"{acct}/usage/?group={group['id']}&key={group['keys'][0]}",
            ),
        ):
            out.append(cold_warm(c, name, label, path))
    return out


def admin_calls(base: str, rid: str) -> list[Timed]:
    out = []
    with httpx.Client(base_url=base, timeout=HTTP_TIMEOUT_S) as c:
        form_login(c, base + "/django-admin/login/", ADMIN_USER, ADMIN_PASSWORD)
        for name, path in (
            ("admin usage log list", "/django-admin/usage/usagelog/"),
            ("admin usage log ?q=<request id>", f"/django-admin/usage/usagelog/?q={rid}"),
            ("admin reservation list", "/django-admin/billing/reservation/"),
            ("admin ledger entry list", "/django-admin/billing/ledgerentry/"),
        ):
            out.append(cold_warm(c, name, "admin", path))
    return out


def timed_months(start: datetime, end: datetime) -> dict[str, str]:
    """The months timed ("YYYY-MM", UTC: the tenants' zone): the window's oldest, the one in
    its middle (the earlier of two) and the current one."""
    months = []
    month = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while month <= end:
        months.append(f"{month:%Y-%m}")
        month = (month + timedelta(days=32)).replace(day=1)
    picked = (months[0], months[(len(months) - 1) // 2], months[-1])
    return dict(zip(MONTH_NAMES, picked, strict=True))


@dataclass
class ReceiptExport:
    """A month's receipts export (JSON lines): cold, the whole download; warm, the median
    time to its first byte over WARM_REPEATS more calls (each closed after its first chunk)."""

    name: str
    tenant: str
    url: str
    status: int = 0
    statuses: list[int] = field(default_factory=list)
    ttfb_cold_ms: float | None = None
    total_cold_ms: float | None = None
    ttfb_warm_ms: float | None = None
    bytes: int = 0
    lines: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.statuses) and all(s == 200 for s in self.statuses)


def first_byte(
    client: httpx.Client, url: str, *, whole: bool
) -> tuple[int, float, float, int, int]:
    """GET `url` streamed: (status, ms to the first body byte, ms in all, bytes, lines); only
    the first chunk unless `whole`."""
    t0 = time.perf_counter()
    ttfb, size, lines = None, 0, 0
    with client.stream("GET", url) as resp:
        for chunk in resp.iter_raw():
            if ttfb is None:
                ttfb = (time.perf_counter() - t0) * 1000.0
            size += len(chunk)
            lines += chunk.count(b"\n")
            if not whole:
                break
        status = resp.status_code
    total = (time.perf_counter() - t0) * 1000.0
    return status, ttfb if ttfb is not None else total, total, size, lines


def receipts_export(client: httpx.Client, name: str, tenant: str, url: str) -> ReceiptExport:
    ex = ReceiptExport(name, tenant, url)
    status, ex.ttfb_cold_ms, ex.total_cold_ms, ex.bytes, ex.lines = first_byte(
        client, url, whole=True
    )
    ex.statuses.append(status)
    warm = []
    for _ in range(WARM_REPEATS):
        status, ttfb, *_ = first_byte(client, url, whole=False)
        ex.statuses.append(status)
        warm.append(ttfb)
    ex.ttfb_warm_ms = statistics.median(warm)
    ex.status = max(ex.statuses, key=lambda s: s != 200)
    print(
        f"  {tenant:5s} {name:34s} ttfb cold {ex.ttfb_cold_ms:9.1f} ms  warm "
        f"{ex.ttfb_warm_ms:9.1f} ms  total {ex.total_cold_ms:9.1f} ms  {ex.bytes:>10d} B"
        f"  {ex.lines} lines  {ex.status}",
        flush=True,
    )
    return ex


def receipt_calls(
    base: str, tenant: dict[str, Any], label: str, months: dict[str, str]
) -> tuple[list[Timed], list[ReceiptExport]]:
    """The tenant's receipts for each timed month (the API's first page, its statement, the
    dashboard's page and its JSON lines export) and its wallet ledger (the API, the page)."""
    calls, exports = [], []
    account = tenant["account_id"]
    headers = {"Authorization": f"Token {tenant['api_token']}"}
    with httpx.Client(base_url=base, headers=headers, timeout=HTTP_TIMEOUT_S) as c:
        for which, month in months.items():
            for name, path in (
                (f"api receipts ?period={which}", f"/api/receipts?period={month}"),
                (f"api statement ?period={which}", f"/api/receipts/statement?period={month}"),
            ):
                calls.append(cold_warm(c, name, label, path))
        calls.append(cold_warm(c, "api wallet ledger", label, f"/api/accounts/{account}/ledger"))
    with httpx.Client(base_url=base, timeout=HTTP_TIMEOUT_S) as c:
        form_login(c, base + "/login/", tenant["username"], OWNER_PASSWORD)
        acct = f"/dashboard/{account}"
        for which, month in months.items():
            path = f"{acct}/receipts/?period={month}"
            calls.append(cold_warm(c, f"dashboard receipts ?period={which}", label, path))
        calls.append(cold_warm(c, "dashboard wallet", label, f"{acct}/wallet/"))
        for which, month in months.items():
            path = f"{acct}/receipts/export.jsonl?period={month}"
            exports.append(receipts_export(c, f"receipts export ?period={which}", label, path))
    return calls, exports


@dataclass
class Export:
    url: str
    status: int = 0
    ttfb_ms: float | None = None
    total_ms: float | None = None
    bytes: int = 0
    rows: int = 0
    rss_before_kib: int = 0
    rss_peak_kib: int = 0


def vm_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def csv_export(base: str, tenant: dict[str, Any], pid: int) -> Export:
    today = datetime.now(UTC).date()
    this_month = today.replace(day=1)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    url = f"/api/usage/export.csv?start={last_month}&end={this_month}"
    ex = Export(url, rss_before_kib=vm_rss_kib(pid))
    peak = [ex.rss_before_kib]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], vm_rss_kib(pid))
            time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    headers = {"Authorization": f"Token {tenant['api_token']}"}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=HTTP_TIMEOUT_S) as c:
            t0 = time.perf_counter()
            with c.stream("GET", url) as resp:
                ex.status = resp.status_code
                for chunk in resp.iter_raw():
                    if ex.ttfb_ms is None:
                        ex.ttfb_ms = (time.perf_counter() - t0) * 1000.0
                    ex.bytes += len(chunk)
                    ex.rows += chunk.count(b"\n")
            ex.total_ms = (time.perf_counter() - t0) * 1000.0
    finally:
        done.set()
        poller.join()
    ex.rss_peak_kib = peak[0]
    ex.rows = max(0, ex.rows - 1)  # the header line
    print(
        f"  big   CSV export last month: ttfb {bench.fmt(ex.ttfb_ms, 1)} ms, total "
        f"{bench.fmt(ex.total_ms, 1)} ms, {ex.bytes} B, {ex.rows} rows, RSS "
        f"{ex.rss_before_kib // 1024} -> peak {ex.rss_peak_kib // 1024} MiB, {ex.status}",
        flush=True,
    )
    return ex


# --------------------------------------------------------------------------- hot path


@dataclass
class HotPath:
    database: str  # "empty" or "loaded"
    n: int
    c: int
    ok: int = 0
    failed: int = 0
    failure_kinds: dict[str, int] = field(default_factory=dict)
    rps: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    gateway_cpu_ms_per_req: float | None = None
    postgres_cpu_ms_per_req: float | None = None  # every postgres process of the host
    postgres_db_cpu_ms_per_req: float | None = None  # this database's backends only
    gateway_error_logs: int = 0


def postgres_host_cpu_ms() -> dict[int, float]:
    """User+system CPU (ms) of each live `postgres` process of the host, by pid."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if data[data.index(b"(") + 1 : data.rindex(b")")] != b"postgres":
            continue
        rest = data[data.rindex(b")") + 2 :].split()
        out[int(entry)] = (int(rest[11]) + int(rest[12])) * 1000.0 / bench.CLK_TCK
    return out


async def hot_path(
    servers: bench.Servers, args: argparse.Namespace, label: str, url: str
) -> HotPath:
    n, c = args.scale_requests, args.scale_concurrency
    hp = HotPath(label, n, c)
    sc = bench.Scenario("gw-openai", "gw", "openai", False)
    prep = bench.prepare(sc, servers, bench.DEFAULT_WORDS)
    watch = bench.Watch(servers, time.monotonic() + 1800)
    timeout = aiohttp.ClientTimeout(total=bench.REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=c, limit_per_host=c)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        warm = await bench.drive(session, prep, False, min(200, max(1, n // 10)), c, watch)
        hp.failure_kinds.update({f"warm-up {k}": v for k, v in warm.kinds.items()})
        hp.failed += warm.failed
        log_offset = servers.gateway.stderr_size()
        gw0, pg0, db0 = (
            bench.cpu_ms(servers.gateway.pid),
            postgres_host_cpu_ms(),
            fairness.postgres_cpu_ms(url),
        )
        t0 = time.perf_counter()
        tally = await bench.drive(session, prep, False, n, c, watch)
        elapsed = time.perf_counter() - t0
        gw1, pg1, db1 = (
            bench.cpu_ms(servers.gateway.pid),
            postgres_host_cpu_ms(),
            fairness.postgres_cpu_ms(url),
        )
    done = tally.ok + tally.failed
    hp.ok, hp.failed = tally.ok, hp.failed + tally.failed
    hp.failure_kinds.update(tally.kinds)
    hp.rps = done / elapsed if elapsed else 0.0
    hp.p50_ms = bench.ms(bench.percentile(tally.latencies, 0.5))
    hp.p99_ms = bench.ms(bench.percentile(tally.latencies, 0.99))
    if done:
        hp.gateway_cpu_ms_per_req = (gw1 - gw0) / done
        # Per process: one that started in between counts whole, one that ended is lost.
        hp.postgres_cpu_ms_per_req = fairness.postgres_delta_ms(pg0, pg1) / done
        db = fairness.postgres_delta_ms(db0, db1)
        hp.postgres_db_cpu_ms_per_req = None if db is None else db / done
    await asyncio.sleep(0.5)  # the last settlements' log lines
    hp.gateway_error_logs = sum(
        1
        for line in servers.gateway.stderr_since(log_offset).splitlines()
        if servers.gateway.is_error_line(line)
    )
    print(
        f"  hot path ({label} database): {hp.ok}/{n} ok, {hp.rps:.0f} req/s, p50 "
        f"{bench.fmt(hp.p50_ms)} ms, gateway cpu/req {bench.fmt(hp.gateway_cpu_ms_per_req, 3)}"
        f" ms, postgres cpu/req {bench.fmt(hp.postgres_cpu_ms_per_req, 3)} ms (this db's "
        f"backends {bench.fmt(hp.postgres_db_cpu_ms_per_req, 3)} ms)",
        flush=True,
    )
    return hp


# --------------------------------------------------------------------------- one database


@dataclass
class Database:
    label: str
    name: str
    url: str
    env: dict[str, str]
    tenants: list[dict[str, Any]] = field(default_factory=list)


def prepare_database(
    args: argparse.Namespace, label: str, tmp: Path, stub_url: str, names: list[str]
) -> Database:
    name = create_database(args.database_url)
    names.append(name)
    url = database_url(args.database_url, name)
    env = bench.child_env(str(tmp / f"var-{label}"), url, args.redis_url)
    env["TOLLGATE_SECURE_COOKIES"] = "false"  # plain http: the session cookie must come back
    print(f"{label} database {name}: migrating and creating {TENANTS} tenants ...", flush=True)
    return Database(label, name, url, env, setup_database(env, stub_url))


def serve(
    args: argparse.Namespace, db: Database, stub: bench.Proc, stub_url: str, tmp: Path,
    procs: list[bench.Proc],
) -> bench.Servers:  # fmt: skip
    if args.redis_url:  # no journal of another run may be stored into this database
        fairness.clear_redis(args.redis_url)
    logdir = tmp / db.label
    logdir.mkdir(exist_ok=True)
    gateway, gw_url = bench.start_gateway(db.env, logdir)
    procs.append(gateway)
    big = db.tenants[0]
    return bench.Servers(stub, gateway, stub_url, gw_url, big["api_key"], big["group_id"])


def stop(proc: bench.Proc, procs: list[bench.Proc]) -> None:
    proc.stop()
    procs.remove(proc)


# --------------------------------------------------------------------------- report


def report(doc: dict[str, Any]) -> str:
    parts = []
    ld = doc.get("load")
    if ld:
        parts.append(
            f"load: {ld['rows']} usage rows ({sum(ld['written'].values())} rows in all) in "
            f"{ld['copy_s']:.1f} s: {ld['usage_rows_per_s']:.0f} usage rows/s, "
            f"{ld['all_rows_per_s']:.0f} rows/s; rollups rebuilt in "
            f"{bench.fmt(ld['rollups_s'], 1)} s; VACUUM ANALYZE {ld['vacuum_s']:.1f} s"
        )
        loaded = ld.get("sizes_before_retention") or {}
        rows = [
            [t, str(ld["written"].get(t, "-")), str(ld["counted"].get(t, "-")),
             f"{loaded[t] / ld['rows']:.0f}" if t in loaded else "-",
             f"{ld['sizes_bytes'].get(t, 0) / 2**20:.1f}",
             f"{ld['sizes_bytes'].get(t, 0) / ld['rows']:.0f}"]
            for t in SIZE_TABLES
            if t in ld["sizes_bytes"]
        ]  # fmt: skip
        rows.append(
            [
                "total",
                "",
                "",
                f"{sum(loaded.values()) / ld['rows']:.0f}" if loaded else "-",
                f"{ld['total_bytes'] / 2**20:.1f}",
                f"{ld['bytes_per_usage_row']:.0f}",
            ]
        )
        header = [
            "table",
            "written",
            "counted",
            "B/row as loaded",
            "MiB (+indexes)",
            "B per usage row",
        ]
        parts.append(bench.render_table(rows, header))
        if ld.get("attempts"):
            where = (
                f"packed in usage_usagelog.attempt_trail, {bench.fmt(ld['bytes_per_trail'], 1)} B"
                " per trail on disk"
                if ld.get("trails_loaded")
                else f"in {ATTEMPTS}"
            )
            parts.append(
                f"attempts: {ld['attempts']} ({ld['attempts'] / ld['rows']:.3f} per row), {where}"
            )
        billing = (ld.get("retention") or {}).get("billing") or {}
        if billing:
            parts.append(
                f"retention (the defaults, as beat runs it): billing working state before "
                f"{billing['cutoff']}: {len(billing['dropped'])} partitions dropped, "
                f"{billing['deleted_rows']} rows deleted, kept for open rows: "
                f"{', '.join(billing['kept_open']) or 'none'}"
            )
        if ld.get("receipts_loaded"):
            verified = {None: "not run", True: "intact", False: "FAILED"}[ld["receipts_verified"]]
            parts.append(
                f"receipts: {bench.fmt(ld['bytes_per_receipt'], 1)} B per receipt (+indexes);"
                f" per usage row {ld['bytes_per_usage_row']:.0f} B with receipts,"
                f" {ld['bytes_per_usage_row_without_receipts']:.0f} B without; the big"
                f" tenant's chain: verify_receipts {verified}"
            )
    rows = [
        [t["tenant"], t["name"], bench.fmt(t["cold_ms"], 1), bench.fmt(t["warm_ms"], 1),
         str(t["bytes"]), "ok" if all(s == 200 for s in t["statuses"]) else f"HTTP {t['status']}"]
        for t in doc["calls"]
    ]  # fmt: skip
    if rows:
        parts.append(
            bench.render_table(rows, ["who", "call", "cold ms", "warm ms", "bytes", "status"])
        )
    rows = [
        [e["tenant"], e["name"], bench.fmt(e["ttfb_cold_ms"], 1), bench.fmt(e["ttfb_warm_ms"], 1),
         bench.fmt(e["total_cold_ms"], 1), str(e["bytes"]), str(e["lines"]),
         "ok" if all(s == 200 for s in e["statuses"]) else f"HTTP {e['status']}"]
        for e in doc.get("receipt_exports") or []
    ]  # fmt: skip
    if rows:
        months = ", ".join(f"{k} {v}" for k, v in doc["receipt_months"].items())
        parts.append(
            f"receipts exports (JSON lines; months: {months}):\n"
            + bench.render_table(
                rows,
                [
                    "who",
                    "export",
                    "ttfb cold ms",
                    "ttfb warm ms",
                    "total ms",
                    "bytes",
                    "lines",
                    "status",
                ],
            )  # fmt: skip
        )
    ex = doc.get("export")
    if ex:
        parts.append(
            f"CSV export (big tenant, last month): HTTP {ex['status']}, ttfb "
            f"{bench.fmt(ex['ttfb_ms'], 1)} ms, total {bench.fmt(ex['total_ms'], 1)} ms, "
            f"{ex['bytes']} bytes, {ex['rows']} rows, server RSS {ex['rss_before_kib'] // 1024}"
            f" MiB before, peak {ex['rss_peak_kib'] // 1024} MiB"
        )
    rows = [
        [h["database"], str(h["n"]), str(h["c"]), str(h["ok"]), str(h["failed"]),
         f"{h['rps']:.0f}", bench.fmt(h["p50_ms"]), bench.fmt(h["p99_ms"]),
         bench.fmt(h["gateway_cpu_ms_per_req"], 3), bench.fmt(h["postgres_cpu_ms_per_req"], 3),
         bench.fmt(h["postgres_db_cpu_ms_per_req"], 3), str(h["gateway_error_logs"])]
        for h in doc["hot_path"]
    ]  # fmt: skip
    if rows:
        parts.append(
            bench.render_table(
                rows,
                [
                    "hot path db",
                    "n",
                    "c",
                    "ok",
                    "fail",
                    "req/s",
                    "p50 ms",
                    "p99 ms",
                    "gw cpu/req ms",
                    "pg cpu/req ms",
                    "pg db/req ms",
                    "gw ERR logs",
                ],
            )  # fmt: skip
        )
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- main


def main(args: argparse.Namespace) -> int:
    problem = check_arguments(args)
    if problem:
        print(f"setup failed: {problem}", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-scale-"))
    procs: list[bench.Proc] = []
    names: list[str] = []
    doc: dict[str, Any] = {
        "scenario": "scale",
        "args": {
            "rows": args.scale_rows,
            "requests": args.scale_requests,
            "concurrency": args.scale_concurrency,
            "project": str(args.project),
            "seed": args.scale_seed,
            "redis": bool(args.redis_url),
        },
        "host": {"cpus": os.cpu_count(), "load_before": os.getloadavg()},
        "load": None,
        "calls": [],
        "export": None,
        "receipt_months": {},
        "receipt_exports": [],
        "hot_path": [],
        "databases": names,  # dropped at the end unless --keep
    }
    status = 0
    try:
        with in_project(args.project):
            try:
                stub, stub_url = bench.start_stub(
                    bench.child_env(str(tmp / "var"), None, None), tmp
                )
                procs.append(stub)
                empty = prepare_database(args, "empty", tmp, stub_url, names)
                servers = serve(args, empty, stub, stub_url, tmp, procs)
            except (RuntimeError, subprocess.TimeoutExpired, OSError, psycopg.Error) as exc:
                return bench.setup_failed(exc, procs)
            print(f"project {args.project}; {os.cpu_count()} CPUs", flush=True)
            hp = bench.run_loop(lambda: hot_path(servers, args, "empty", empty.url))
            doc["hot_path"].append(asdict(hp))
            stop(servers.gateway, procs)
            try:
                loaded = prepare_database(args, "loaded", tmp, stub_url, names)
                print(f"loading {args.scale_rows} usage rows ...", flush=True)
                result = load(args, loaded.env, loaded.url, loaded.tenants)
                doc["load"] = asdict(result)
                print(
                    f"  loaded in {result.copy_s:.1f} s ({result.usage_rows_per_s:.0f} usage "
                    f"rows/s), {result.total_bytes / 2**20:.1f} MiB, "
                    f"{result.bytes_per_usage_row:.0f} B per usage row",
                    flush=True,
                )
                servers = serve(args, loaded, stub, stub_url, tmp, procs)
            except (RuntimeError, subprocess.TimeoutExpired, OSError, psycopg.Error) as exc:
                return bench.setup_failed(exc, procs)
            base = servers.gw_url
            big, small = loaded.tenants[0], loaded.tenants[1]
            mids = {int(k): v for k, v in result.middle_request_ids.items()}
            calls: list[Timed] = []
            exports: list[ReceiptExport] = []
            try:
                calls += tenant_calls(base, big, "big", mids[big["account_id"]])
                calls += tenant_calls(base, small, "small", mids[small["account_id"]])
                calls += admin_calls(base, mids[big["account_id"]])
                doc["export"] = asdict(csv_export(base, big, servers.gateway.pid))
                if result.receipts_loaded:
                    months = timed_months(
                        datetime.fromisoformat(result.start), datetime.fromisoformat(result.end)
                    )
                    doc["receipt_months"] = months
                    for tenant, label in ((big, "big"), (small, "small")):
                        timed, exported = receipt_calls(base, tenant, label, months)
                        calls += timed
                        exports += exported
            except (httpx.HTTPError, RuntimeError, ValueError) as exc:
                print(f"a timed call failed: {exc!r}", file=sys.stderr)
                status = 1
            doc["calls"] = [asdict(t) for t in calls]
            doc["receipt_exports"] = [asdict(e) for e in exports]
            hp = bench.run_loop(lambda: hot_path(servers, args, "loaded", loaded.url))
            doc["hot_path"].append(asdict(hp))
        every_call: list[Timed | ReceiptExport] = [*calls, *exports]
        bad_calls = [t for t in every_call if not t.ok]
        export_ok = doc["export"] is not None and doc["export"]["status"] == 200
        hot_ok = all(h["failed"] == 0 and h["ok"] == h["n"] for h in doc["hot_path"])
        verified = doc["load"]["receipts_verified"] is not False
        if bad_calls or not export_ok or not hot_ok or not verified:
            status = 1
        doc["ok"] = status == 0
        print()
        print(report(doc))
        if status:
            for t in bad_calls:
                print(f"FAILED: {t.tenant} {t.name} {t.url}: {t.statuses}")
            if doc["load"]["receipts_verified"] is False:
                print(f"FAILED: verify_receipts:\n{doc['load']['receipts_verify_output']}")
            for h in doc["hot_path"]:
                if h["failure_kinds"]:
                    print(f"hot path ({h['database']}) failures: {h['failure_kinds']}")
            print(f"\n--- gateway stderr tail ---\n{servers.gateway.stderr_tail(40)}")
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=2, default=str) + "\n")
            print(f"\nwrote {args.json}")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    finally:
        bench.stop_all(procs, tmp, keep=args.keep)
        for name in names:
            if args.keep:
                print(f"kept database {name}", file=sys.stderr)
            else:
                with contextlib.suppress(psycopg.Error):
                    drop_database(args.database_url, name)
    return status


if __name__ == "__main__":  # `python bench/scale.py ...`: run.py's parser, with --scale
    sys.exit(bench.main(["--scale", *sys.argv[1:]]))
