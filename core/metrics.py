"""Prometheus metrics of the gateway (served at /metrics), summed over its worker processes.

A lone process (`make run`, the tests' gateways) keeps its metrics in memory. A worker of a
multi-process server (`uvicorn --workers N`, gunicorn) writes them to mmap files in a
directory it shares with its siblings (prometheus_client's multiprocess mode), and a scrape,
whichever worker answers it, merges every file there: counters and histograms are summed
over all workers, dead ones included (a restarted worker never makes a total go back);
in-flight is summed over live workers; breaker state is the latest any live worker saw;
Redis degraded is the max over live workers.

The directory is `TOLLGATE_METRICS_DIR/<server pid>-<its start time>`, one per server run,
so a restart starts from empty files; a worker removes the directories of servers that are
gone when it starts. A dead worker's live gauges are dropped at the next scrape, and a
worker drops any left under its own pid before it writes (pids recycle). An operator who
sets PROMETHEUS_MULTIPROC_DIR instead gets exactly that directory and must empty it before
each start.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)

from core.config import tollgate
from core.usage_record import WEB_UNIT_FIELDS, UsageRecord

FLEET_DIR_NAME = re.compile(r"^(\d+)-(\d*)$")
LIVE_GAUGE_FILE = re.compile(r"^gauge_live\w+?_(\d+)\.db$")


def _started(pid: int) -> str:
    """Return a process's start time in clock ticks since boot ("" off Linux): pids recycle."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _server_pid() -> int | None:
    """Return the pid of the server whose workers we share metrics with; None when alone."""
    if multiprocessing.parent_process() is not None:  # uvicorn --workers (or --reload) spawned us
        return os.getppid()
    if os.environ.get("SERVER_SOFTWARE", "").startswith("gunicorn/"):  # its arbiter forked us
        return os.getppid()
    return None


def _fleet_dir() -> Path | None:
    """Return (and prepare) the directory this process shares its metrics in, if any."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        return Path(given)
    server = _server_pid()
    if server is None:
        return None
    base = tollgate().metrics_dir
    base.mkdir(parents=True, exist_ok=True)
    for old in base.iterdir():
        match = FLEET_DIR_NAME.match(old.name)
        if match and old.is_dir():
            pid = int(match.group(1))
            if not (_alive(pid) and _started(pid) == match.group(2)):
                shutil.rmtree(old, ignore_errors=True)  # a sibling may be removing it too
    fleet = base / f"{server}-{_started(server)}"
    fleet.mkdir(exist_ok=True)
    return fleet


FLEET_DIR = _fleet_dir()
if FLEET_DIR is not None:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(FLEET_DIR)
    multiprocess.mark_process_dead(os.getpid(), str(FLEET_DIR))  # a recycled pid's gauges
    # Chosen here, before the first metric, whatever imported prometheus_client first.
    values.ValueClass = values.MultiProcessValue()

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "tollgate_requests_total",
    "Requests by route, status and code.",
    ["route", "status", "code"],
    registry=REGISTRY,
)
UPSTREAM_LATENCY = Histogram(
    "tollgate_upstream_latency_seconds",
    "Upstream call latency to answer or first chunk.",
    ["provider"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
# Time in the gateway outside the vendor call, up to the answer's head (its
# X-Tollgate-Overhead-Ms), by route: our routes' names, a handful.
OVERHEAD = Histogram(
    "tollgate_gateway_overhead_seconds",
    "Time a request spent in the gateway outside its vendor calls, up to the answer's head.",
    ["route"],
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
GUARDRAIL_VERDICTS = Counter(
    "tollgate_guardrail_verdicts_total",
    "Guardrail checks, by kind, phase, action and whether they found a value (matched), not"
    " (clean), saw only part of a stream that was cut (partial), or could not check (failed: a"
    " webhook's endpoint gave no verdict). Names stay out of the labels: tenants name their"
    " own guardrails.",
    ["kind", "phase", "action", "result"],
    registry=REGISTRY,
)
TIME_TO_FIRST_TOKEN = Histogram(
    "tollgate_time_to_first_token_seconds",
    "A streamed answer's first token, from the request's arrival, by provider profile.",
    ["provider"],
    registry=REGISTRY,
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
IN_FLIGHT = Gauge(
    "tollgate_in_flight",
    "Requests in flight (summed over live workers).",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
PLATFORM_KEY_REFUSED = Counter(
    "tollgate_platform_key_refused_total",
    "Platform keys the vendor refused (401 / 403) and Tollgate took out: alert on any.",
    ["profile", "key", "status"],
    registry=REGISTRY,
)
CIRCUIT_STATE = Gauge(
    "tollgate_circuit_state",
    "Platform breaker state: 0 closed, 1 half-open, 2 open.",
    ["provider", "model"],
    registry=REGISTRY,
    multiprocess_mode="livemostrecent",  # breakers are shared: the latest observation wins
)
REDIS_DEGRADED = Gauge(
    "tollgate_redis_degraded",
    "1 while Redis is unreachable and state is per-process (in any live worker).",
    registry=REGISTRY,
    multiprocess_mode="livemax",
)
RECONCILE_DRIFT = Gauge(
    "tollgate_bandwidth_drift_micro",
    "Bandwidth charge drift corrected by the last run.",
    registry=REGISTRY,
    multiprocess_mode="mostrecent",
)
ROLLUP_DRIFT = Counter(
    "tollgate_usage_rollup_drift_days",
    "Closed days whose usage rollups differed from the rows (rebuilt from them).",
    registry=REGISTRY,
)

# Usage of finished requests. Labels are bounded: the served model comes from our catalog
# (never the client's string), the group is our id, served_by is platform or team.
USAGE_LABELS = ("model", "group", "served_by")
TOKENS_IN = Counter(
    "tollgate_tokens_in",
    "Input tokens of finished requests.",
    USAGE_LABELS,
    registry=REGISTRY,
)
TOKENS_OUT = Counter(
    "tollgate_tokens_out",
    "Output tokens of finished requests.",
    USAGE_LABELS,
    registry=REGISTRY,
)
PROVIDER_COST = Counter(
    "tollgate_provider_cost_micro",
    "Provider cost of platform-served tokens and web units, in micro-USD.",
    USAGE_LABELS,
    registry=REGISTRY,
)
BYTES_IN = Counter(
    "tollgate_bytes_in",
    "Request body bytes read from clients.",
    USAGE_LABELS,
    registry=REGISTRY,
)
BYTES_OUT = Counter(
    "tollgate_bytes_out",
    "Response bytes sent to clients.",
    USAGE_LABELS,
    registry=REGISTRY,
)
# Web acquisition units by kind: the record's field names, three values at most.
WEB_UNITS = Counter(
    "tollgate_web_units",
    "Web units of finished requests: pages fetched, pages rendered, search queries.",
    (*USAGE_LABELS, "kind"),
    registry=REGISTRY,
)
_usage_series: dict[tuple[str, str, str], tuple] = {}
_children: dict[tuple, Any] = {}


def labeled(metric: Any, *values: str) -> Any:
    """Return `metric`'s series for these label values, looked up once: `.labels()` costs
    more than the `.inc()` after it, on every request. Label values are the gateway's own
    (endpoints, statuses, configured providers and models), never a client's text."""
    key = (metric, values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def count_usage(record: UsageRecord) -> None:
    """Add one finished request's tokens, cost, bytes and web units to its (model, group,
    served_by)."""
    group = record.group_id
    key = (
        record.model_served or "none",
        "none" if group is None else str(group),
        record.served_by or "none",
    )
    series = _usage_series.get(key)
    if series is None:  # once per label set: .labels() costs more than .inc()
        series = _usage_series[key] = tuple(
            counter.labels(*key)
            for counter in (TOKENS_IN, TOKENS_OUT, PROVIDER_COST, BYTES_IN, BYTES_OUT)
        )
    amounts = (
        record.tokens_in + record.byok_tokens_in,
        record.tokens_out + record.byok_tokens_out,
        record.provider_cost_micro,
        record.bytes_in,
        record.bytes_out,
    )
    for child, amount in zip(series, amounts, strict=True):
        if amount:
            child.inc(amount)
    for kind in WEB_UNIT_FIELDS:
        amount = getattr(record, kind)
        if amount:  # a series only once a request used the kind: chat traffic adds none
            labeled(WEB_UNITS, *key, kind).inc(amount)


def _forget_dead_workers(fleet: Path) -> None:
    """Drop the live gauges (in-flight, ...) of workers that died without saying so."""
    for path in fleet.iterdir():
        match = LIVE_GAUGE_FILE.match(path.name)
        if match and not _alive(int(match.group(1))):
            multiprocess.mark_process_dead(int(match.group(1)), str(fleet))


def exposition() -> bytes:
    """Render every metric in the text format, merged over the server's workers if several."""
    if FLEET_DIR is None:
        return generate_latest(REGISTRY)
    _forget_dead_workers(FLEET_DIR)
    fleet = CollectorRegistry()
    multiprocess.MultiProcessCollector(fleet, path=str(FLEET_DIR))
    return generate_latest(fleet)


USAGE_DEAD_LETTERS = Counter(
    "tollgate_usage_dead_letters_total",
    "Usage rows moved to the dead-letter table because the database refused them.",
    registry=REGISTRY,
)
UNMARKED_CALLS = Counter(
    "tollgate_unmarked_calls_total",
    "Platform calls sent while the database could not record them as sent (crash exposure).",
    registry=REGISTRY,
)
AUTH_LOOKUPS = Counter(
    "tollgate_auth_lookups",
    "Virtual-key lookups in the database, by outcome (found, unknown, error).",
    ["outcome"],
    registry=REGISTRY,
)
AUTH_THROTTLED = Counter(
    "tollgate_auth_throttled",
    "Requests refused LM-3001 before a key lookup: their address failed too many.",
    registry=REGISTRY,
)
CACHE_LOOKUPS = Counter(
    "tollgate_cache_lookups_total",
    "Response-cache outcomes by route: hit, miss, bypass (not looked up), error (store down).",
    ["route", "outcome"],
    registry=REGISTRY,
)
CACHE_STORES = Counter(
    "tollgate_cache_stores_total",
    "Answers written to the response cache, or skipped (too large, store down).",
    ["outcome"],
    registry=REGISTRY,
)
CACHE_STORED_BYTES = Counter(
    "tollgate_cache_stored_bytes_total",
    "Compressed bytes written to the response cache.",
    registry=REGISTRY,
)
CACHE_SAVED_MICRO = Counter(
    "tollgate_cache_saved_micro_usd_total",
    "What cache hits saved: the replayed calls' cost less the hits' price, micro-USD.",
    registry=REGISTRY,
)
