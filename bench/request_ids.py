"""Random vs time-ordered request ids: what the shape of the id costs PostgreSQL's inserts.

    python bench/request_ids.py [--rows N] [--database-url URL]

Every request adds its id to unique indexes that grow with history (the billing tables'
request_id keys). This bench inserts `--rows` ids (default 3,000,000) in batches of 500 into
a table shaped like those (a varchar(64) unique key, a few columns), once with random ids
(uuid4 hex, as the gateway mints them) and once with time-ordered ones (12 hex digits of the
millisecond, then 20 random: UUIDv7's order in the same 32 characters), each in a fresh
database of its own, and reports for the last fifth of the rows (the index at its largest):
rows/s, the server's CPU per 1,000 rows (all postgres processes, /proc), and the index
blocks read from outside shared_buffers. Then drops its databases.
"""

from __future__ import annotations

import argparse
import os
import secrets
import time
import uuid
from pathlib import Path

import psycopg

BATCH = 500


def random_id() -> str:
    return uuid.uuid4().hex


def time_ordered_id() -> str:
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_hex(10)}"


def postgres_cpu_s() -> float:
    """User+system CPU seconds of every postgres process (the server and its backends)."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name.startswith("postgres"):
            fields = stat[stat.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def run(url: str, name: str, make_id, rows: int) -> dict:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    target = psycopg.conninfo.make_conninfo(url, dbname=name)
    try:
        with psycopg.connect(target, autocommit=True) as db:
            db.execute(
                "CREATE TABLE settled (id bigserial PRIMARY KEY, request_id varchar(64) NOT NULL"
                " UNIQUE, group_id bigint NOT NULL, bandwidth_micro bigint NOT NULL,"
                " created_at timestamptz NOT NULL DEFAULT now())"
            )
            measured_from = rows - rows // 5
            done, t0, cpu0, read0 = 0, 0.0, 0.0, 0
            while done < rows:
                if done == measured_from:
                    t0, cpu0, read0 = time.perf_counter(), postgres_cpu_s(), _index_reads(db)
                ids = [make_id() for _ in range(BATCH)]
                db.execute(
                    "INSERT INTO settled (request_id, group_id, bandwidth_micro)"
                    " SELECT unnest(%s::varchar[]), 7, 100",
                    [ids],
                )
                done += BATCH
            elapsed = time.perf_counter() - t0
            cpu = postgres_cpu_s() - cpu0
            reads = _index_reads(db) - read0
            row = db.execute("SELECT pg_relation_size('settled_request_id_key')").fetchone()
            assert row is not None  # a function's value: one row
            (size,) = row
        measured = rows - measured_from
        return {
            "rows_per_s": measured / elapsed,
            "cpu_ms_per_1000": cpu * 1000 / (measured / 1000),
            "index_blocks_read": reads,
            "index_mib": size / 2**20,
        }
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")


def _index_reads(db) -> int:
    (reads,) = db.execute(
        "SELECT coalesce(sum(idx_blks_read), 0) FROM pg_statio_user_indexes"
        " WHERE indexrelname = 'settled_request_id_key'"
    ).fetchone()
    return int(reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
    )
    args = parser.parse_args()
    rows = args.rows - args.rows % BATCH
    print(f"{rows:,} ids per run; figures over the last {rows // 5:,}")
    for label, make_id in (("random (uuid4)", random_id), ("time-ordered", time_ordered_id)):
        name = f"tollgate_ids_{secrets.token_hex(4)}"
        figures = run(args.database_url, name, make_id, rows)
        print(
            f"{label:15s} {figures['rows_per_s']:10,.0f} rows/s"
            f"  {figures['cpu_ms_per_1000']:7.1f} ms CPU per 1,000 rows"
            f"  {figures['index_blocks_read']:9,d} index blocks read"
            f"  index {figures['index_mib']:6.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
